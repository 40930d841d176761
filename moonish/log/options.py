"""How a writer writes (:class:`WriterOptions`, :class:`FsyncPolicy`) and what opening it found
(:class:`Recovery`); ``moonish.log.writer`` re-exports them."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from moonish.errors import InvalidArgumentError
from moonish.log.format import SEGMENT_HEADER_BYTES

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 64 * 1024


class FsyncPolicy(enum.Enum):
    """When appended bytes are forced to stable storage (Redis ``appendfsync``)."""

    ALWAYS = "always"
    EVERY = "every"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class WriterOptions:
    """How a :class:`WalWriter` writes.

    Attributes:
        shard_id: the shard's id, stored in every segment header. ``None`` takes it from the
            existing segments (0 for a new shard); a value that differs from them is an error.
        segment_bytes: rotate to a new segment before a write would make the current one larger
            than this (a single batch larger than this gets a segment of its own).
        fsync: the durability policy.
        fsync_interval_ms: sync period under ``FsyncPolicy.EVERY``.
        index_interval_bytes: write a sparse index entry about every this many bytes of frames.
        heartbeat_ms: close time (``moonish.log.heartbeat``) this often, so merged readers'
            resolved watermarks advance past an idle shard; ``None`` only at ``close``.
        on_rotate: called with the new segment's base LSN after each rotation, with the
            writer's lock held: it must be quick, must not raise and must not call the writer
            (``ShardWriter`` notes it and applies retention after the append returns).
        write_buffer_bytes: 0: each append is written (one ``write``) before it returns.
            Above 0: appends are gathered in memory and written together, by one ``write``,
            once this many bytes are pending, and by ``flush``, ``sync``, a heartbeat, a
            rotation and ``close``; readers see them then. Each append's frames are the
            same either way, so a crash in the middle leaves a torn tail cut at an append's
            end (what an import needs: many small appends, none of which has to be visible
            at once). A failed write of gathered appends stops the writer. Not with
            ``FsyncPolicy.ALWAYS``.
    """

    shard_id: int | None = None
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    fsync: FsyncPolicy = FsyncPolicy.EVERY
    fsync_interval_ms: int = 1000
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    heartbeat_ms: int | None = 1000
    on_rotate: Callable[[int], None] | None = None
    write_buffer_bytes: int = 0

    def __post_init__(self) -> None:
        if self.segment_bytes <= SEGMENT_HEADER_BYTES:
            raise InvalidArgumentError(f"segment_bytes must exceed {SEGMENT_HEADER_BYTES}")
        if self.fsync_interval_ms <= 0 or self.index_interval_bytes <= 0:
            raise InvalidArgumentError("fsync_interval_ms and index_interval_bytes must be > 0")
        if self.heartbeat_ms is not None and self.heartbeat_ms <= 0:
            raise InvalidArgumentError(f"heartbeat_ms must be > 0, got {self.heartbeat_ms}")
        if self.write_buffer_bytes < 0 or (
            self.write_buffer_bytes and self.fsync is FsyncPolicy.ALWAYS
        ):
            raise InvalidArgumentError(
                "write_buffer_bytes must be >= 0, and 0 with FsyncPolicy.ALWAYS"
            )


@dataclass(frozen=True, slots=True)
class Recovery:
    """What opening the writer found at the end of the newest segment."""

    segment: str
    truncated_bytes: int
    """Bytes of torn tail cut off (0 when the log ended cleanly)."""
    next_lsn: int
    discarded: tuple[int, int] | None = None
    """The LSNs ``(first, last)`` the torn tail's frames named, recorded as discarded in
    control.json (``None``: the tail named none)."""
