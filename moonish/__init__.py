"""moonish: change data capture from segmented write-ahead logs, as Debezium envelopes.

The public API: :func:`read` (one batch: from a shard's LSN :class:`Cursor`, or merged over a
data directory's shards from a :class:`Token` or a named consumer), :func:`tail` (an
iterator, optionally following the log, with :class:`Resolved` watermarks), :func:`ack`
(confirm a consumer's position; ``moonish.consumers`` manages them), :func:`info`;
:func:`connect` (the same reads from a ``moonish serve`` server, moonish.remote); every
error is a :class:`MoonishError`. Writing with keyspace state: :class:`ShardWriter` (Redis commands,
c/u/d, images per :class:`ViewType`, expiry, snapshots); the raw log:
``moonish.log.writer.WalWriter``; record types: ``moonish.log.records``; operator repairs:
``moonish.log.repair``; Redis AOF import: ``moonish.redis.aof.importer``.

This module only gathers the public names; docs/architecture.md maps the packages.
"""

from moonish.extensions import check_extensions

check_extensions()  # first: refuses compiled modules older than their source (docs/build.md)

from moonish.cdc.api import ack, read, tail
from moonish.cdc.cursor import Cursor
from moonish.cdc.events import ChangeEvent, EventBatch
from moonish.cdc.merged import MergedBatch, Resolved
from moonish.cdc.merged_read import MergedResult, MergedTail
from moonish.cdc.shard_read import ReadResult, Tail, info, shard_dirs
from moonish.cdc.token import Token
from moonish.datadir import consumers
from moonish.errors import (
    CommandError,
    ConsumerLostError,
    ConsumerNotFoundError,
    CorruptionError,
    InvalidArgumentError,
    LsnDiscardedError,
    LsnNotRetainedError,
    MoonishError,
    PositionNotRetainedError,
    UnavailableError,
    UnsupportedFormatError,
    WriterLockedError,
)
from moonish.log.records import ViewType
from moonish.remote import connect
from moonish.state.config import StreamConfig
from moonish.state.shard import ExecResult, ShardOptions, ShardWriter
from moonish.version import __version__

__all__ = [
    "ChangeEvent",
    "CommandError",
    "ConsumerLostError",
    "ConsumerNotFoundError",
    "CorruptionError",
    "EventBatch",
    "Cursor",
    "ExecResult",
    "InvalidArgumentError",
    "LsnDiscardedError",
    "LsnNotRetainedError",
    "MergedBatch",
    "MergedResult",
    "MergedTail",
    "MoonishError",
    "PositionNotRetainedError",
    "ReadResult",
    "Resolved",
    "ShardOptions",
    "ShardWriter",
    "StreamConfig",
    "Tail",
    "Token",
    "UnavailableError",
    "UnsupportedFormatError",
    "ViewType",
    "WriterLockedError",
    "__version__",
    "ack",
    "connect",
    "consumers",
    "info",
    "read",
    "shard_dirs",
    "tail",
]
