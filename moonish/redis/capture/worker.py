"""The worker side of a capture in several processes (moonish.redis.capture.workers starts the
workers): what a worker holds once its shards are open (:class:`WorkerShards`), and what a
single master's worker runs over them (:func:`serve_stream`): report its shards' positions,
then apply its part of every batch the capture sends, reporting how far its shards are synced.

A worker has at most :data:`REPORTS_IN_FLIGHT` reports unread by the capture (the capture says
how many it read with each batch), so it never blocks writing to the capture while the capture
waits to give it a batch.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Container
from dataclasses import dataclass
from multiprocessing.connection import Connection

from moonish.clock import Clock
from moonish.gcpolicy import settle_gc
from moonish.redis.capture.apply import ShardApplier
from moonish.redis.capture.status import CaptureOptions
from moonish.redis.routing.exchange import PeerExchange
from moonish.redis.routing.keyfilter import KeyFilter
from moonish.state.shard import ShardWriter
from moonish.state.spread import SpreadLoad

REPORTS_IN_FLIGHT = 4
"""Reports a worker may have sent that the capture has not read yet."""


Serve = Callable[["WorkerShards", Connection], None]
"""What a worker runs over its open shards: read the capture's steps from the pipe until it
ends (then sync and return); raise what fails (sent to the capture)."""


@dataclass(frozen=True, slots=True)
class WorkerShards:
    """A worker's open shards: every shard's writer (stand-ins for the ones it does not
    own), the ones it owns, the exchange with its peers, and its setup's options."""

    writers: list[ShardWriter]
    owned: set[int]
    exchange: PeerExchange
    options: CaptureOptions
    clock: Clock
    spread: SpreadLoad

    def applier(
        self,
        key_filter: KeyFilter,
        link: str | None = None,
        restamp: Callable[[int, bytes], bytes] | None = None,
        slots: Container[int] | None = None,
    ) -> ShardApplier:
        """An applier over these shards (a cluster link's with ``link``, ``restamp`` and
        ``slots``: moonish.redis.capture.apply ``ShardApplier``)."""
        return ShardApplier(
            self.writers,
            self.owned,
            self.options,
            self.clock,
            self.exchange,
            spread=self.spread,
            key_filter=key_filter,
            link=link,
            restamp=restamp,
            slots=slots,
        )


def serve_stream(shards: WorkerShards, link: Connection) -> None:
    """One stream's worker: report its shards' positions, then apply the capture's steps."""
    applier = shards.applier(KeyFilter(shards.options.key_filter))
    link.send(("positions", applier.positions()))
    _serve(applier, link, shards.options)


def _serve(applier: ShardApplier, link: Connection, options: CaptureOptions) -> None:
    """Run the capture's steps until it closes the pipe (then sync and return)."""
    sent = 0
    settled = False
    reported = applier.durable
    while True:
        try:
            message = link.recv()
        except (EOFError, OSError):  # the capture stopped (or died): keep what was applied
            applier.sync()
            return
        kind = message[0]
        if kind == "batch":
            _, pickled, path, seen, dropped, settled_end, settled_db = message
            applier.apply_part(pickle.loads(pickled), path, dropped, settled_end, settled_db)
            if (applier.tick() or applier.durable > reported) and sent - seen < REPORTS_IN_FLIGHT:
                counts = applier.counts
                totals = (
                    counts.commands,
                    counts.transactions,
                    sum(counts.records),
                    counts.rdb_keys,
                    counts.removed_keys,
                )
                link.send(("durable", applier.durable, totals))
                sent += 1
                reported = applier.durable
            continue
        if kind == "start":
            applier.start(message[1])
        elif kind == "full":
            _, replid, offset, spool, path = message
            with open(spool, "rb") as file:
                applier.full_resync(replid, offset, file, path)
        elif kind == "continue":
            applier.continued(message[1], message[2])
        elif kind == "disconnected":
            applier.disconnected()
        elif kind == "finish":
            applier.finish()
        if kind in ("full", "continue") and options.settle_gc and not settled:
            settle_gc()  # (the loaded keyspace lives on; moonish.gcpolicy)
            settled = True
        if kind != "continue":
            link.send(("settled", applier.applied, applier.db, applier.durable, applier.counts))
            sent += 1
            reported = applier.durable
