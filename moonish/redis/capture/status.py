"""What a live capture tells the world besides its records: ``<data_dir>/capture.json``, its
progress lines, and the options and report of :func:`moonish.redis.capture.runner.capture`.

``capture.json`` (a checked file, moonish.fileio; replaced atomically about once a second while
a capture runs, and when it stops)::

    {"format": "moonish-capture", "version": 1,
     "master": "redis://host:port",     # the master's address, without credentials
     "replid": "<40 hex>",              # the replication ID the capture follows
     "received_offset": N,              # the master's replication offset received so far
     "durable_offset": N,               # every change up to here is in the shards' logs and
                                        # synced (what REPLCONF ACK tells the master)
     "time_us": T,                      # when this was written (the capture's clock)
     "running": true | false,           # false once the capture stopped cleanly
     "crc32c": ...}

The file is optional: it says how far behind the capture is (``received_offset -
durable_offset`` bytes, and ``time_us`` for how fresh that is) without asking Redis; the
shards' logs alone say where each shard stands (moonish.redis.routing.sources). The master's
own offset is not known to the capture between two commands; ``INFO replication`` on the
master (``master_repl_offset`` against the replica's ``offset``) gives the exact lag.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from moonish.fileio import dump_checked, read_checked, replace_atomically
from moonish.redis.replication.messages import ReplicaOptions
from moonish.state.autosnapshot import SnapshotPolicy

STATUS_NAME = "capture.json"
FORMAT = "moonish-capture"
VERSION = 1


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
        status_interval_ms: how often ``capture.json`` and the progress callback are updated.
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


@dataclass
class CaptureReport:
    """What a capture did (also passed to the progress callback while it runs).

    Attributes:
        master: the master's address (without credentials).
        replid: the replication ID followed (``""`` before the first sync).
        received_offset: the replication offset received (whole commands).
        durable_offset: the offset acknowledged: everything up to it is synced.
        commands: write commands applied (not counting SELECT, MULTI, EXEC, PING, PUBLISH).
        transactions: MULTI/EXEC blocks applied.
        records: records appended over all shards (position markers included).
        per_shard: records appended to each shard (with ``processes`` > 1, as of the last
            start, resync, reconnect or stop; ``records`` is current).
        full_resyncs: full resyncs received (``+FULLRESYNC``).
        continues: partial resyncs (``+CONTINUE``).
        rdb_keys: keys of full resyncs' RDBs written (``r`` rows, or ``c``/``u`` differences).
        removed_keys: keys a full resync found gone (``d`` records).
        reconnects: connections lost and tried again.
        last_error: the last network error, or ``None``.
        resumed_from: per shard, its source position when the capture started.
        commands_per_s: commands applied per second since the previous progress call.
    """

    master: str = ""
    replid: str = ""
    received_offset: int = 0
    durable_offset: int = 0
    commands: int = 0
    transactions: int = 0
    records: int = 0
    per_shard: list[int] = field(default_factory=list)
    full_resyncs: int = 0
    continues: int = 0
    rdb_keys: int = 0
    removed_keys: int = 0
    reconnects: int = 0
    last_error: str | None = None
    resumed_from: list[str] = field(default_factory=list)
    commands_per_s: float = 0.0

    @property
    def lag_bytes(self) -> int:
        """Bytes received but not yet durable."""
        return self.received_offset - self.durable_offset

    def line(self) -> str:
        """The progress line: commands/s, offsets and lag."""
        return (
            f"capture {self.master}: {self.commands_per_s:,.0f} commands/s, {self.commands} "
            f"commands, offset {self.durable_offset} durable of {self.received_offset} "
            f"received (lag {self.lag_bytes} bytes), {self.reconnects} reconnects"
        )


def write_status(data_dir: str, report: CaptureReport, time_us: int, *, running: bool) -> None:
    """Replace ``<data_dir>/capture.json`` (atomically) with ``report``'s offsets."""
    document: dict[str, object] = {
        "format": FORMAT,
        "version": VERSION,
        "master": report.master,
        "replid": report.replid,
        "received_offset": report.received_offset,
        "durable_offset": report.durable_offset,
        "time_us": time_us,
        "running": running,
    }
    replace_atomically(os.path.join(data_dir, STATUS_NAME), [dump_checked(document)])


def read_status(data_dir: str) -> dict[str, Any] | None:
    """The members of ``<data_dir>/capture.json`` with ``lag_bytes`` added, or ``None`` when
    no capture wrote one.

    Raises:
        CorruptionError, UnsupportedFormatError: a damaged or unknown file.
    """
    document = read_checked(os.path.join(data_dir, STATUS_NAME), FORMAT, VERSION)
    if document is None:
        return None
    document["lag_bytes"] = document["received_offset"] - document["durable_offset"]
    return document
