"""What a live capture tells the world besides its records: ``<data_dir>/capture.json``, its
progress and event lines, and the options and report of
:func:`moonish.redis.capture.runner.capture`.

``capture.json`` (a checked file, moonish.fileio; replaced atomically about once a second while
a capture runs, while it reconnects, and when it stops)::

    {"format": "moonish-capture", "version": 3,
     "master": "redis://host:port",     # the master's address, without credentials
     "replid": "<40 hex>",              # the replication ID the capture follows
     "link": "connecting" | "connected" | "reconnecting" | "stopped",
     "received_offset": N,              # the master's replication offset received so far
     "durable_offset": N,               # every change up to here is in the shards' logs and
                                        # synced (what REPLCONF ACK tells the master)
     "master_offset": N | null,         # the master's master_repl_offset (INFO replication
                                        # on a side connection), null: unknown
     "bytes_behind": N | null,          # master_offset - durable_offset, never negative;
                                        # null while the master does not answer
     "seconds_behind": S | null,        # how long the master has been past durable_offset
     "master_error": "..." | null,      # why master_offset is unknown
     "reconnects": N, "last_error": "..." | null,
     "full_resyncs": N,
     "last_full_resync": null | {"time_us", "replid", "offset", "rdb_bytes", "rows",
                                 "created", "updated", "deleted"},
     "links": null | [{...}, ...],      # a Redis Cluster capture: per link (one per master,
                                        # moonish.redis.cluster.links LinkReport) "link",
                                        # "node", "address", "read_from", "role",
                                        # "slots", "replid", the
                                        # offsets and figures above, "state", "full_resyncs",
                                        # "partial_resyncs", "reconnects", "last_error"; the
                                        # members above are then the links' sums (seconds
                                        # behind: the largest)
     "migrations": null | {...},        # a cluster capture: keys slot migrations moved
                                        # (moonish.redis.cluster.handoff's counts)
     "time_us": T,                      # when this was written (the capture's clock)
     "running": true | false,           # false once the capture stopped
     "crc32c": ...}

Version 1 (before the master's offset was asked) had only ``master``, ``replid``, the two
offsets, ``time_us`` and ``running``; version 2 had no ``links``; :func:`read_status` reads
all three, the missing members as ``null``. The file is optional: the shards' logs alone say
where each shard stands (moonish.redis.routing.sources). moonish.redis.capture.behind defines
bytes and seconds behind.

Events (:class:`CaptureEvent`, one per ``PSYNC`` answer, full resync and lost connection) and
the report's :meth:`CaptureReport.line` are what ``moonish wal capture`` logs.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

from moonish.errors import UnsupportedFormatError
from moonish.fileio import dump_checked, load_checked, replace_atomically
from moonish.redis.replication.messages import Continue, FullResync, ReplicaOptions
from moonish.redis.routing.keyfilter import NO_FILTER, FilterSpec
from moonish.state.autosnapshot import SnapshotPolicy

STATUS_NAME = "capture.json"
FORMAT = "moonish-capture"
VERSION = 3
"""The version written."""
SUPPORTED_VERSIONS = (1, 2, 3)
"""The versions read."""
CONNECTING, CONNECTED, RECONNECTING, STOPPED = "connecting", "connected", "reconnecting", "stopped"
"""The replication link's states (``CaptureReport.link``)."""


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    """How a capture behaves (besides what its shards are).

    Attributes:
        sync_interval_ms: sync the shards that were written at most this often (0: after
            every batch of commands read); a change is acknowledged to the master only once
            synced.
        batch_wait_ms: how long one read of the stream waits for commands (also how quickly
            a stop request is noticed).
        mark_interval_ms: how often shards whose stored position lags the applied offset
            (no command touched them) get a position marker, so a restart's ``PSYNC`` asks
            for an offset the master's backlog still holds.
        status_interval_ms: how often ``capture.json`` and the progress callback are updated,
            and the master asked for its offset (moonish.redis.capture.behind).
        overdue_expiry_ms: a key (or hash field) whose expiry time passed longer ago than
            this without the master's ``DEL`` is expired by the capture itself (checked
            every ``mark_interval_ms``): the master tells its replicas nothing of a key that
            expired while it reloaded (``DEBUG RELOAD``). Up to then the master's own
            ``DEL`` is awaited, as a replica does; the hosts' clocks must agree within it.
        backoff_min_ms, backoff_max_ms: the wait before reconnecting after a network error
            doubles from ``backoff_min_ms`` up to ``backoff_max_ms`` (reset once connected).
        max_reconnects: give up (raise the last network error) after this many consecutive
            failed connections; ``None``: never.
        replica: the replication link's options (timeouts, ACK period, TLS files).
        settle_gc: once synced, freeze the objects that exist and raise the garbage
            collector's thresholds (moonish.gcpolicy.settle_gc): process-wide, so for a
            process that only captures (``moonish wal capture`` sets it; docs/benchmarks.md §11
            measures it).
        snapshots: when the shards' writers take snapshots on their own
            (moonish.state.autosnapshot), in this process or the workers.
        key_filter: the source filter (moonish.redis.routing.keyfilter): keys it leaves out
            never reach the keyspaces or the logs; must be the data directory's.
    """

    sync_interval_ms: int = 100
    batch_wait_ms: int = 100
    mark_interval_ms: int = 1_000
    status_interval_ms: int = 1_000
    overdue_expiry_ms: int = 10_000
    backoff_min_ms: int = 100
    backoff_max_ms: int = 5_000
    max_reconnects: int | None = None
    replica: ReplicaOptions = field(default_factory=ReplicaOptions)
    settle_gc: bool = False
    snapshots: SnapshotPolicy = field(default_factory=SnapshotPolicy)
    key_filter: FilterSpec = NO_FILTER


@dataclass(frozen=True, slots=True)
class FullResyncOutcome:
    """What a full resync did.

    Attributes:
        time_us: when it was applied (the capture's clock).
        replid, offset: the stream it started (``+FULLRESYNC <replid> <offset>``).
        rdb_bytes: the RDB's size.
        seconds: how long reading and applying it took.
        rows: keys written as ``r`` rows (a first load).
        created, updated, deleted: keys written as differences (``c``, ``u``, ``d``).
    """

    time_us: int
    replid: str
    offset: int
    rdb_bytes: int
    seconds: float
    rows: int
    created: int
    updated: int
    deleted: int

    def to_json(self) -> dict[str, object]:
        return {
            "time_us": self.time_us,
            "replid": self.replid,
            "offset": self.offset,
            "rdb_bytes": self.rdb_bytes,
            "seconds": round(self.seconds, 3),
            "rows": self.rows,
            "created": self.created,
            "updated": self.updated,
            "deleted": self.deleted,
        }


@dataclass(frozen=True, slots=True)
class CaptureEvent:
    """Something a capture logs as it happens.

    Attributes:
        kind: ``psync`` (the master's answer), ``full_resync`` (applied), ``reconnect`` (the
            link was lost or could not be made; the capture tries again after a backoff),
            ``source`` (another node than the last one is followed: a failover, Sentinel's
            new master, or a node given by hand; moonish.redis.capture.source).
        time_us: when (the capture's clock).
        text: one line for a person.
        fields: the same as values (for a machine-readable log).
    """

    kind: str
    time_us: int
    text: str
    fields: dict[str, object]


def psync_event(time_us: int, asked: str, answer: FullResync | Continue) -> CaptureEvent:
    """The master's answer to ``asked`` (``PSYNC <replid> <offset>`` or ``PSYNC ? -1``)."""
    fields: dict[str, object] = {"request": asked, "replid": answer.replid}
    if isinstance(answer, FullResync):
        size = "diskless" if answer.size_bytes is None else f"{answer.size_bytes:,} bytes"
        text = f"{asked}: +FULLRESYNC {answer.replid} {answer.offset} (RDB: {size})"
        fields.update(answer="+FULLRESYNC", offset=answer.offset, rdb_bytes=answer.size_bytes)
    else:
        text = f"{asked}: +CONTINUE {answer.replid}"
        if answer.previous_replid is not None:
            text += f" (a new replication ID after a failover, was {answer.previous_replid})"
        fields.update(answer="+CONTINUE", offset=answer.offset)
    return CaptureEvent("psync", time_us, text, fields)


def full_resync_event(outcome: FullResyncOutcome) -> CaptureEvent:
    """A full resync applied: its RDB's size and what it wrote."""
    o = outcome
    how = "as rows" if o.rows or not (o.created or o.updated or o.deleted) else "as differences"
    text = (
        f"full resync applied {how}: RDB of {o.rdb_bytes:,} bytes in {o.seconds:.1f} s; "
        f"{o.rows:,} keys loaded, c {o.created:,}, u {o.updated:,}, d {o.deleted:,}"
    )
    return CaptureEvent("full_resync", o.time_us, text, o.to_json())


def reconnect_event(time_us: int, reason: str, attempt: int, backoff_ms: int) -> CaptureEvent:
    """The link was lost (or not made) for ``reason``; attempt ``attempt`` in ``backoff_ms``."""
    text = f"link lost: {reason}; reconnecting in {backoff_ms / 1000:g} s (attempt {attempt})"
    fields = {"reason": reason, "attempt": attempt, "backoff_ms": backoff_ms}
    return CaptureEvent("reconnect", time_us, text, dict(fields))


def source_event(time_us: int, text: str, node: str) -> CaptureEvent:
    """Another node than the last one is followed (``text`` says why it continues)."""
    return CaptureEvent("source", time_us, text, {"node": node})


@dataclass
class CaptureReport:
    """What a capture did (also passed to the progress callback while it runs).

    Attributes:
        master: the master's address (without credentials).
        replid: the replication ID followed (``""`` before the first sync).
        link: the replication link: ``connecting``, ``connected``, ``reconnecting``,
            ``stopped``.
        received_offset: the replication offset received (whole commands).
        durable_offset: the offset acknowledged: everything up to it is synced.
        master_offset: the master's ``master_repl_offset`` last asked (``None``: unknown).
        bytes_behind: ``master_offset - durable_offset``, never negative (``None``: unknown).
        seconds_behind: how long the master has been past ``durable_offset`` (``None``:
            unknown); moonish.redis.capture.behind.
        master_error: why the master's offset is unknown, or ``None``.
        commands: write commands applied (not counting SELECT, MULTI, EXEC, PING, PUBLISH).
        transactions: MULTI/EXEC blocks applied.
        records: records appended over all shards (position markers included).
        per_shard: records appended to each shard (with ``processes`` > 1, as of the last
            start, resync, reconnect or stop; ``records`` is current).
        full_resyncs: full resyncs received (``+FULLRESYNC``).
        last_full_resync: the last one's outcome, or ``None``.
        continues: partial resyncs (``+CONTINUE``).
        rdb_keys: keys of full resyncs' RDBs written (``r`` rows, or ``c``/``u`` differences).
        removed_keys: keys a full resync found gone (``d`` records).
        reconnects: connections lost and tried again.
        last_error: the last network error, or ``None``.
        resumed_from: per shard, its source position when the capture started.
        commands_per_s: commands applied per second since the previous progress call.
        filtered: what the source filter left out in this run: commands by rule, keys of
            full resyncs as ``keys:<rule>`` (moonish.redis.routing.keyfilter).
        links: a Redis Cluster capture's links (``capture.json`` ``links``), else ``None``.
        migrations: a Redis Cluster capture's slot migrations seen
            (moonish.redis.cluster.handoff ``Handoffs.counts``), else ``None``.
    """

    master: str = ""
    replid: str = ""
    link: str = CONNECTING
    received_offset: int = 0
    durable_offset: int = 0
    master_offset: int | None = None
    bytes_behind: int | None = None
    seconds_behind: float | None = None
    master_error: str | None = None
    commands: int = 0
    transactions: int = 0
    records: int = 0
    per_shard: list[int] = field(default_factory=list)
    full_resyncs: int = 0
    last_full_resync: FullResyncOutcome | None = None
    continues: int = 0
    rdb_keys: int = 0
    removed_keys: int = 0
    reconnects: int = 0
    last_error: str | None = None
    resumed_from: list[str] = field(default_factory=list)
    commands_per_s: float = 0.0
    filtered: dict[str, int] = field(default_factory=dict)
    links: list[dict[str, object]] | None = None
    migrations: dict[str, int] | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet durable."""
        return max(0, self.received_offset - self.durable_offset)

    def behind(self) -> str:
        """``"N bytes, S s behind the master"``, or why that is unknown."""
        if self.bytes_behind is None or self.seconds_behind is None:
            return f"behind the master: unknown ({self.master_error or 'not asked yet'})"
        return f"{self.bytes_behind:,} bytes, {self.seconds_behind:.1f} s behind the master"

    def line(self) -> str:
        """The progress line: link, commands/s, how far behind, offsets, reconnects."""
        return (
            f"capture {self.master} ({self.link}): {self.commands_per_s:,.0f} commands/s, "
            f"{self.commands:,} commands; {self.behind()}; offset {self.durable_offset:,} "
            f"durable of {self.received_offset:,} received; {self.reconnects} reconnects"
        )

    def to_json(self) -> dict[str, object]:
        """The members of ``capture.json`` this report gives (``format``, ``version``,
        ``time_us`` and ``running`` aside)."""
        resync = self.last_full_resync
        return {
            "master": self.master,
            "replid": self.replid,
            "link": self.link,
            "received_offset": self.received_offset,
            "durable_offset": self.durable_offset,
            "master_offset": self.master_offset,
            "bytes_behind": self.bytes_behind,
            "seconds_behind": (
                None if self.seconds_behind is None else round(self.seconds_behind, 3)
            ),
            "master_error": self.master_error,
            "reconnects": self.reconnects,
            "last_error": self.last_error,
            "full_resyncs": self.full_resyncs,
            "last_full_resync": None if resync is None else resync.to_json(),
            "links": self.links,
            "migrations": self.migrations,
        }


def write_status(data_dir: str, report: CaptureReport, time_us: int, *, running: bool) -> None:
    """Replace ``<data_dir>/capture.json`` (atomically) with ``report``'s state."""
    document: dict[str, object] = {"format": FORMAT, "version": VERSION, **report.to_json()}
    document["time_us"] = time_us
    document["running"] = running
    replace_atomically(os.path.join(data_dir, STATUS_NAME), [dump_checked(document)])


def remove_status(data_dir: str) -> None:
    """Remove ``<data_dir>/capture.json`` if there is one."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(data_dir, STATUS_NAME))


_ADDED_SINCE_1 = (
    "link",
    "master_offset",
    "bytes_behind",
    "seconds_behind",
    "master_error",
    "reconnects",
    "last_error",
    "full_resyncs",
    "last_full_resync",
    "links",
    "migrations",
)


def read_status(data_dir: str) -> dict[str, Any] | None:
    """The members of ``<data_dir>/capture.json`` (version 1 or 2; members version 1 lacks
    are ``None``) with ``pending_bytes`` added (received but not yet durable), or ``None``
    when no capture wrote one.

    Raises:
        CorruptionError: a damaged file.
        UnsupportedFormatError: another format, or a version this build does not read.
    """
    path = os.path.join(data_dir, STATUS_NAME)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    document = load_checked(data, path)
    if document.get("format") != FORMAT or document.get("version") not in SUPPORTED_VERSIONS:
        raise UnsupportedFormatError(
            f"not {FORMAT} version {' or '.join(map(str, SUPPORTED_VERSIONS))}: "
            f"{document.get('format')!r} version {document.get('version')!r}",
            path=path,
        )
    for name in _ADDED_SINCE_1:
        document.setdefault(name, None)
    document["pending_bytes"] = max(0, document["received_offset"] - document["durable_offset"])
    return document
