"""moonish: change data capture from segmented write-ahead logs, as Debezium envelopes.

The public API: :func:`read` (one batch from a cursor), :func:`tail` (an iterator, optionally
following the log), :func:`info`; positions are :class:`Cursor` values; every error is a
:class:`MoonishError`. Writing with keyspace state: :class:`ShardWriter` (Redis commands,
c/u/d, images per :class:`ViewType`, expiry, snapshots); the raw log:
``moonish.log.writer.WalWriter``; records: ``moonish.log.records``; operator repairs:
``moonish.log.repair``; Redis AOF import: ``moonish.redis.importer``.
"""

__version__ = "0.1.0"  # first: submodules import it while this package initialises

from moonish.cdc.cursor import Cursor
from moonish.cdc.events import ChangeEvent, EventBatch
from moonish.cdc.shard_read import ReadResult, Tail, info, read, shard_dirs, tail
from moonish.errors import (
    CommandError,
    CorruptionError,
    InvalidArgumentError,
    LsnDiscardedError,
    LsnNotRetainedError,
    MoonishError,
    UnavailableError,
    UnsupportedFormatError,
    WriterLockedError,
)
from moonish.log.records import ViewType
from moonish.state.config import StreamConfig
from moonish.state.shard import ExecResult, ShardOptions, ShardWriter

__all__ = [
    "ChangeEvent",
    "CommandError",
    "CorruptionError",
    "EventBatch",
    "Cursor",
    "ExecResult",
    "InvalidArgumentError",
    "LsnDiscardedError",
    "LsnNotRetainedError",
    "MoonishError",
    "ReadResult",
    "ShardOptions",
    "ShardWriter",
    "StreamConfig",
    "Tail",
    "UnavailableError",
    "UnsupportedFormatError",
    "ViewType",
    "WriterLockedError",
    "__version__",
    "info",
    "read",
    "shard_dirs",
    "tail",
]
