"""A worker process of a cluster capture in several processes (moonish.redis.cluster.workers):
one :class:`~moonish.redis.capture.apply.ShardApplier` per link over the worker's shards.

The worker is started by moonish.redis.capture.workers ``start_workers`` (its shards opened,
stand-ins for the others). It reports its shards' stored positions, then runs the capture's
steps, each naming its link (``add``, ``start``, ``batch``, ``full``, ``continue``,
``slots``, ``disconnected``, ``finish``; ``seen``: how many reports the capture has read), in
the order they come: the capture's order over the links. A paired ``RESTORE-ASKING`` marked
:data:`~moonish.redis.cluster.handoff.UNLESS_EQUAL` is decided here, on the key's shard's
keyspace (moonish.redis.cluster.handoff ``restore_unless_equal``).

Reports: ``settled`` after each step but ``batch`` and ``slots`` (the link's applied offset,
db, durable offset and counts; the libraries, from the worker that owns shard 0; the
migration counts); ``durable`` when a link's shards are synced further (at most
:data:`~moonish.redis.capture.worker.REPORTS_IN_FLIGHT` unread). Every applier is ticked
(synced, marked) at least every :data:`TICK_S`, also while no step comes.
"""

from __future__ import annotations

import pickle
import time
from collections import Counter
from multiprocessing.connection import Connection
from typing import Any

from moonish.gcpolicy import settle_gc
from moonish.redis.capture.apply import ShardApplier
from moonish.redis.capture.worker import REPORTS_IN_FLIGHT, WorkerShards
from moonish.redis.cluster.handoff import RESTORE_ASKING, UNLESS_EQUAL, restore_unless_equal
from moonish.redis.cluster.links import LinkTable
from moonish.redis.routing.keyfilter import KeyFilter
from moonish.redis.routing.sources import decode_position
from moonish.slots import shard_of_key

TICK_S = 0.02
"""How often a worker ticks every link's applier (sync and marks when they are due)."""


def serve_links(shards: WorkerShards, pipe: Connection) -> None:
    """A cluster capture's worker (module docstring): report the owned shards' positions,
    then serve the capture's steps until it closes the pipe (every applier synced then).

    Raises:
        CorruptionError: a shard stores a single master's position.
        Any error of an applier's step (the capture raises it).
    """
    writers = shards.writers
    table = LinkTable(writers)
    positions = {
        shard: decode_position(writers[shard].source, writers[shard].shard_dir)
        for shard in shards.owned
    }
    pipe.send(("positions", positions))
    _LinkServer(shards, table, pipe).run()


class _LinkServer:
    """The worker's appliers, one per link, and its reports."""

    def __init__(self, shards: WorkerShards, table: LinkTable, pipe: Connection) -> None:
        self.shards, self.table, self.pipe = shards, table, pipe
        self.appliers: dict[str, ShardApplier] = {}
        self.key_filter = KeyFilter(shards.options.key_filter)
        self.migrations: Counter[str] = Counter()
        self.reported: dict[str, int] = {}
        self.sent = self.seen = 0  # durable reports sent, and read by the capture
        self.loads = 0  # full resyncs over the links: every worker counts them alike
        self.gc_settled = False
        self.ticked = time.monotonic()

    def run(self) -> None:
        pipe = self.pipe
        while True:
            if pipe.poll(TICK_S):
                try:
                    message = pipe.recv()
                except (EOFError, OSError):  # the capture stopped (or died): keep what is applied
                    for applier in self.appliers.values():
                        applier.sync()
                    return
                self.step(message)
            if time.monotonic() - self.ticked >= TICK_S:
                self.ticked = time.monotonic()
                for applier in self.appliers.values():
                    applier.tick()
                self.report()

    def step(self, message: tuple[Any, ...]) -> None:
        """Run one of the capture's steps (module docstring)."""
        kind, link = message[0], message[1]
        if kind == "seen":
            self.seen = link
            return
        shards = self.shards
        if kind == "add":
            restamp = self.table.restamp(link)
            self.appliers[link] = shards.applier(self.key_filter, link, restamp, message[2])
            return
        applier = self.appliers[link]
        if kind == "batch":
            _, _, pickled, path, dropped, end, db = message
            applier.apply_part(self.decided(pickle.loads(pickled)), path, dropped, end, db)
            applier.tick()
            self.report()
            return
        if kind == "slots":
            applier.slots = message[2]
            return
        if kind == "start":
            applier.start(message[2])
        elif kind == "full":
            _, _, replid, offset, spool, path, first, last = message
            applier.loads = self.loads  # the spread load's number (moonish.state.spread)
            with open(spool, "rb") as file:
                applier.full_resync(replid, offset, file, path, first, last)
            self.loads = applier.loads
        elif kind == "continue":
            applier.continued(message[2], message[3])
        elif kind == "disconnected":
            applier.disconnected()
        elif kind == "finish":
            applier.finish()
        if kind in ("full", "continue") and shards.options.settle_gc and not self.gc_settled:
            settle_gc()  # (the loaded keyspace lives on; moonish.gcpolicy)
            self.gc_settled = True
        libraries = dict(shards.writers[0].libraries) if 0 in shards.owned else None
        state = (applier.applied, applier.db, applier.durable, applier.counts)
        self.pipe.send(("settled", link, *state, libraries, dict(self.migrations)))
        self.reported[link] = applier.durable

    def decided(self, part: list[Any]) -> list[Any]:
        """``part`` with each marked ``RESTORE-ASKING`` of a key of this worker's shards
        decided (moonish.redis.cluster.handoff ``restore_unless_equal``), the others'
        unmarked (their shards are skipped anyway)."""
        writers, owned = self.shards.writers, self.shards.owned
        for index, (start, end, argv) in enumerate(part):
            if len(argv) > 4 and argv[-1] == UNLESS_EQUAL and argv[0].upper() == RESTORE_ASKING:
                argv = argv[:-1]
                if shard_of_key(argv[1], len(writers)) in owned:
                    argv = restore_unless_equal(argv, writers, self.migrations)
                part[index] = (start, end, argv)
        return part

    def report(self) -> None:
        """Send the links whose durable offset moved, when the capture has read enough of
        the reports sent before."""
        if self.sent - self.seen >= REPORTS_IN_FLIGHT:
            return
        moved = {
            link: (applier.durable, applier.counts)
            for link, applier in self.appliers.items()
            if applier.durable > self.reported.get(link, -1)
        }
        if moved:
            self.pipe.send(("durable", moved, dict(self.migrations)))
            self.sent += 1
            for link, (durable, _) in moved.items():
                self.reported[link] = durable
