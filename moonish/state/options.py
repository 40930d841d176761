"""A shard writer's options (:class:`ShardOptions`) and what its write path returns
(:class:`ExecResult`, :class:`Prepared`); moonish.state.shard re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from moonish.log.records import KvChange, Message
from moonish.log.writer import WriterOptions
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.config import StreamConfig
from moonish.state.rebuild import Progress


@dataclass(frozen=True, slots=True)
class ShardOptions:
    """Attributes:
    log: the WAL writer's options (shard id, segment size, fsync policy).
    stream: the stream configuration of a new shard (an existing one keeps its own).
    expiry_sweep_ms: period of the active expiry sweep thread; 0: no thread.
    snapshots: when the writer takes snapshots on its own (moonish.state.autosnapshot);
        :meth:`SnapshotPolicy.off` for never.
    on_recovery: called while the writer rebuilds its keyspace as it opens, with (the LSN
        rebuilt up to, the last LSN) after the snapshot and every batch of records replayed
        (moonish.state.rebuild); what it raises stops the opening (the log is closed) and
        goes to the caller.
    requests: answer requests (``moonish wal checkpoint``) on the shard's socket
        (moonish.state.requests).
    rebuild: ``False`` opens the shard without rebuilding its keyspace, only to check or
        create it (a caller whose worker processes open it again): such a writer refuses
        every write (``UnavailableError``) and answers no request.
    """

    log: WriterOptions = field(default_factory=WriterOptions)
    stream: StreamConfig = field(default_factory=StreamConfig)
    expiry_sweep_ms: int = 100
    snapshots: SnapshotPolicy = field(default_factory=SnapshotPolicy)
    on_recovery: Progress | None = None
    requests: bool = True
    rebuild: bool = True


class ExecResult(NamedTuple):
    """The reply (Redis's, as Python values; a list of replies or :class:`CommandError` for
    a transaction) and the LSNs appended, expiry records included."""

    reply: Any
    lsns: list[int]


class Prepared(NamedTuple):
    """A command run on the keyspace, not yet appended: its key changes, then its message
    records (FUNCTION)."""

    reply: Any
    expired: list[KvChange]
    records: list[KvChange | Message]
