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
