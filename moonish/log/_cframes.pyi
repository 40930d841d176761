"""Types of the C extension moonish/log/_cframes.c (see its leading comment)."""

from collections.abc import Callable, Sequence
from typing import Any

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
def scan(
    buf: bytes,
    pos: int,
    next_lsn: int,
    max_records: int,
    mid_batch_start: bool,
    file_offset: int,
) -> tuple[list[Any], int, bool]: ...
def configure_scan(frame_type: type) -> None: ...
