"""Types of the C extension moonish/log/_cframes.c (see its leading comment)."""

from collections.abc import Callable, Sequence

def encode_changes(
    records: Sequence[object], first_lsn: int, commit_us: int, flags: int, source: bytes | None
) -> bytes | None: ...
def kv_change(*fields: object) -> object: ...
def configure(
    kv_change_type: type,
    row_flags: dict[str, int],
    record_type: int,
    crc32c: Callable[[bytes], int],
) -> None: ...
