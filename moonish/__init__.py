"""moonish: change data capture from segmented write-ahead logs, as Debezium envelopes.

The public API: :func:`read` (one batch from a cursor), :func:`tail` (an iterator, optionally
following the log), :func:`info`; positions are :class:`Cursor` values; every error is a
:class:`MoonishError`. Writing: ``moonish.log.writer.WalWriter``; records:
``moonish.log.records``; Redis AOF import: ``moonish.redis.importer``.
"""

__version__ = "0.1.0"  # first: submodules import it while this package initialises

from moonish.api import ReadResult, Tail, info, read, shard_dirs, tail
from moonish.cursor import Cursor
from moonish.errors import (
    CorruptionError,
    InvalidArgumentError,
    LsnNotRetainedError,
    MoonishError,
    UnavailableError,
    UnsupportedFormatError,
    WriterLockedError,
)
from moonish.events import ChangeEvent, EventBatch

__all__ = [
    "ChangeEvent",
    "CorruptionError",
    "EventBatch",
    "Cursor",
    "InvalidArgumentError",
    "LsnNotRetainedError",
    "MoonishError",
    "ReadResult",
    "Tail",
    "UnavailableError",
    "UnsupportedFormatError",
    "WriterLockedError",
    "__version__",
    "info",
    "read",
    "shard_dirs",
    "tail",
]
