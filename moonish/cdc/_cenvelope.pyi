"""Types of the C extension moonish/cdc/_cenvelope.c (see its leading comment)."""

def encode_changes(
    frames: list[object],
    start: int,
    ops: list[str],
    envelopes: list[bytes],
    source_head: bytes,
    tail: bytes,
    shard: int,
) -> int: ...
def token_lines(
    head: bytes,
    mid: bytes,
    tail: bytes,
    with_envelopes: bool,
    positions: list[int],
    indexes: list[int],
    frames: list[object],
    envelopes: list[bytes],
) -> list[bytes]: ...
