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

This module only gathers the public names; docs/architecture.md maps the packages. Each name
is imported when it is first used (PEP 562), so ``import moonish`` loads nothing else and a
program loads only the layers it uses: a local read never imports the server's or the Kafka
sink's libraries.
"""

import importlib
from typing import TYPE_CHECKING, Any

from moonish.extensions import check_extensions
from moonish.version import __version__

check_extensions()  # first: refuses compiled modules older than their source (docs/build.md)

_ERRORS = "moonish.errors"
_PUBLIC = {
    "ack": "moonish.cdc.api",
    "read": "moonish.cdc.api",
    "tail": "moonish.cdc.api",
    "Cursor": "moonish.cdc.cursor",
    "ChangeEvent": "moonish.cdc.events",
    "EventBatch": "moonish.cdc.events",
    "MergedBatch": "moonish.cdc.merged",
    "Resolved": "moonish.cdc.merged",
    "MergedResult": "moonish.cdc.merged_read",
    "MergedTail": "moonish.cdc.merged_read",
    "ReadResult": "moonish.cdc.shard_read",
    "Tail": "moonish.cdc.shard_read",
    "info": "moonish.cdc.shard_read",
    "shard_dirs": "moonish.cdc.shard_read",
    "Token": "moonish.cdc.token",
    "CommandError": _ERRORS,
    "ConsumerLostError": _ERRORS,
    "ConsumerNotFoundError": _ERRORS,
    "CorruptionError": _ERRORS,
    "InvalidArgumentError": _ERRORS,
    "LsnDiscardedError": _ERRORS,
    "LsnNotRetainedError": _ERRORS,
    "MoonishError": _ERRORS,
    "PositionNotRetainedError": _ERRORS,
    "UnavailableError": _ERRORS,
    "UnsupportedFormatError": _ERRORS,
    "WriterLockedError": _ERRORS,
    "ViewType": "moonish.log.records",
    "connect": "moonish.remote.client",
    "StreamConfig": "moonish.state.config",
    "ExecResult": "moonish.state.shard",
    "ShardOptions": "moonish.state.shard",
    "ShardWriter": "moonish.state.shard",
}
"""Public name -> the module that defines it."""
_MODULES = {"consumers": "moonish.datadir.consumers"}
"""Public modules under another name."""


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then kept in this module); a
    subpackage (``moonish.remote``, ``moonish.cdc``, ...) is imported as ``import moonish.x``
    would.

    Raises:
        AttributeError: no such name.
    """
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC, *_MODULES})


if TYPE_CHECKING:  # what type checkers see: the same names, imported
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
    from moonish.remote.client import connect
    from moonish.state.config import StreamConfig
    from moonish.state.shard import ExecResult, ShardOptions, ShardWriter

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
