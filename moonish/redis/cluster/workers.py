"""A cluster capture in several processes (moonish.redis.cluster.runner, ``processes``): the
workers of moonish.redis.capture.workers own the shards as for a single master, each with one
applier per link over its own shards (moonish.redis.cluster.worker); the capture's process
keeps the connections, the order, the barriers, the pairing's bookkeeping and the topology.

- :class:`LinkWorkers`: the capture's side of the workers: steps sent (each names its link),
  reports read (per link and worker, its durable offset and counts; the workers' migration
  counts; the libraries).
- :class:`WorkerLink`: a link's applier as the session sees it (moonish.redis.cluster.links
  ``LinkApplier``): each batch split by :class:`~moonish.redis.capture.apply.StreamRoute`
  (a command of one key to its shard's worker; a command of a cluster node touches one slot,
  so the others, ``FLUSHALL`` or ``FUNCTION``, go to every worker, each applying it to its
  own shards); ``applied`` is what was sent (each worker applies its pipe in order, so a
  later step sees it applied), ``durable`` the smallest offset over the workers, which is
  what the link acknowledges.
- :class:`WorkerHandoffs`: the pairing, with the keyspace decision of a paired
  ``RESTORE-ASKING`` left to the worker that owns the key, and a copy of the libraries for
  the ``FUNCTION`` reconciliation, kept by applying each reconciled command to it.

A full resync's RDB is spooled to ``.resync-*.rdb`` in the data directory; every worker
reads it, keeping its shards' keys of the link's slots. A worker that dies is an
:class:`~moonish.errors.UnavailableError`; one that fails sends its error, raised here.
"""

from __future__ import annotations

import contextlib
import pickle
from collections import Counter
from collections.abc import Container, Mapping
from typing import Any, BinaryIO

from moonish.errors import CommandError, MoonishError
from moonish.redis.capture.apply import ApplierCounts, ResumePoint, StreamRoute
from moonish.redis.capture.workers import Batch, RemoteChannel, Workers, spooled
from moonish.redis.cluster.handoff import UNLESS_EQUAL, Handoffs
from moonish.redis.replication.resp import ReplCommand
from moonish.state.commands.functions import cmd_function
from moonish.state.keyspace import Access
from moonish.state.libraries import Libraries


class LinkWorkers:
    """The capture's side of the workers (module docstring).

    Args:
        workers: the started workers (moonish.redis.capture.workers ``start_workers``,
            serving moonish.redis.cluster.worker ``serve_links``), their positions read.
        data_dir: where full resyncs are spooled.
    """

    def __init__(self, workers: Workers, data_dir: str) -> None:
        self.channels: list[RemoteChannel] = workers.remote
        self.owner = workers.route.owner
        self.data_dir = data_dir
        self.seen = [0] * len(self.channels)  # durable reports read, per worker
        self.durable: dict[str, list[int]] = {}
        self.counts: dict[str, list[ApplierCounts]] = {}
        self.migrations: list[dict[str, int]] = [{} for _ in self.channels]
        self.libraries = Libraries()
        """The libraries every shard holds, as of the steps sent (module docstring)."""

    def add(self, link: str, slots: Container[int]) -> None:
        """A new link: an applier in every worker."""
        shards = len(self.owner)
        self.durable[link] = [0] * len(self.channels)
        self.counts[link] = [ApplierCounts(records=[0] * shards) for _ in self.channels]
        self.broadcast(("add", link, slots))

    def send(self, worker: int, message: tuple[Any, ...]) -> None:
        """Send ``message`` to ``worker``.

        Raises:
            UnavailableError: the worker died.
            The error the worker failed with.
        """
        channel = self.channels[worker]
        try:
            channel.link.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
        except OSError:  # it ended: what it said (its error), or that it died
            while True:
                self._receive(worker)

    def broadcast(self, message: tuple[Any, ...]) -> None:
        for worker in range(len(self.channels)):
            self.send(worker, message)

    def settle(self, link: str) -> tuple[int, int]:
        """Wait until every worker has run the step just sent for ``link``; the applied
        offset and db of the first worker's applier then (they agree)."""
        states = []
        for worker in range(len(self.channels)):
            seen = self.seen[worker]
            state = self._receive(worker)
            while state is None or state[0] != link:
                state = self._receive(worker)
            states.append((state[1], state[2]))
            self._tell(worker, seen)
        return states[0]

    def poll(self) -> None:
        """Read every report the workers sent (without waiting)."""
        for worker, channel in enumerate(self.channels):
            seen = self.seen[worker]
            while channel.link.poll():
                self._receive(worker)
            self._tell(worker, seen)

    def _tell(self, worker: int, seen: int) -> None:
        """Tell ``worker`` how many of its reports were read, when more than ``seen``."""
        if self.seen[worker] > seen:
            self.send(worker, ("seen", self.seen[worker]))

    def _receive(self, worker: int) -> tuple[str, int, int] | None:
        """Read one report of ``worker``: a settled step (its link, applied offset and db
        returned), durable offsets, or an error (raised)."""
        channel = self.channels[worker]
        try:
            kind, *values = channel.link.recv()
        except (EOFError, OSError):
            raise channel.died() from None
        if kind == "error":
            raise values[0]
        if kind == "durable":
            self.seen[worker] += 1
            moved, self.migrations[worker] = values
            for link, (durable, counts) in moved.items():
                self.durable[link][worker], self.counts[link][worker] = durable, counts
            return None
        link, applied, db, durable, counts, libraries, self.migrations[worker] = values
        self.durable[link][worker], self.counts[link][worker] = durable, counts
        if libraries is not None:
            self.libraries = Libraries(libraries)
        return link, applied, db

    def merged(self, link: str) -> ApplierCounts:
        """``link``'s counts over the workers (commands as one worker counts them: each
        counts the whole stream)."""
        each = self.counts[link]
        filtered: Counter[str] = Counter()
        for counts in each:
            filtered.update(counts.filtered)
        return ApplierCounts(
            each[0].commands,
            each[0].transactions,
            [sum(shard) for shard in zip(*(counts.records for counts in each), strict=True)],
            sum(counts.rdb_keys for counts in each),
            sum(counts.removed_keys for counts in each),
            sum(counts.created for counts in each),
            sum(counts.updated for counts in each),
            dict(filtered),
        )


class WorkerLink:
    """One link's applier in the workers (module docstring): the surface of a
    :class:`~moonish.redis.capture.apply.ShardApplier` that a cluster session uses.

    Args:
        workers: the workers.
        link: the link's id.
        slots: the hash slots its node serves.
    """

    def __init__(self, workers: LinkWorkers, link: str, slots: Container[int]) -> None:
        self.workers, self.link = workers, link
        self._slots: Container[int] | None = slots
        self.route = StreamRoute(workers.owner, len(workers.channels))
        self.replid = ""
        self.applied = 0
        self.db = 0
        workers.add(link, slots)

    @property
    def durable(self) -> int:
        """The offset every worker's shards are synced up to for this link."""
        return min(self.workers.durable[self.link])

    @property
    def counts(self) -> ApplierCounts:
        return self.workers.merged(self.link)

    @property
    def slots(self) -> Container[int] | None:
        return self._slots

    @slots.setter
    def slots(self, slots: Container[int] | None) -> None:
        if slots != self._slots:
            self._slots = slots
            self.workers.broadcast(("slots", self.link, slots))

    def _settled(self, message: tuple[Any, ...]) -> None:
        """Run a step in every worker and wait for them; the stream starts anew there."""
        self.workers.broadcast(message)
        self.applied, self.db = self.workers.settle(self.link)
        self.route.reset(self.db)

    def start(self, point: ResumePoint) -> None:
        self.replid = point.replid
        self._settled(("start", self.link, point))

    def full_resync(
        self,
        replid: str,
        offset: int,
        payload: BinaryIO,
        path: str,
        snapshot_first: bool = True,
        snapshot_last: bool = True,
    ) -> None:
        """Spool the RDB and have every worker load its shards' part (as
        :meth:`ShardApplier.full_resync`)."""
        with spooled(self.workers.data_dir, payload) as name:
            message = ("full", self.link, replid, offset, name, path)
            self._settled((*message, snapshot_first, snapshot_last))
        self.replid = replid

    def continued(self, replid: str, previous_replid: str | None) -> None:
        self._settled(("continue", self.link, replid, previous_replid))
        if previous_replid is not None:
            self.replid = replid

    def apply_batch(self, batch: list[ReplCommand], path: str) -> None:
        """Send each worker its part of ``batch``; the link has applied what was sent."""
        split = Batch(batch, self.route)
        for worker in range(len(self.workers.channels)):
            pickled, dropped = split.part(worker)
            end, db = split.settled
            self.workers.send(worker, ("batch", self.link, pickled, path, dropped, end, db))
        end, db = split.settled
        if end > self.applied:
            self.applied, self.db = end, db

    def tick(self) -> bool:
        """Read the workers' reports; whether :attr:`durable` advanced."""
        before = self.durable
        self.workers.poll()
        return self.durable > before

    def disconnected(self) -> None:
        self._settled(("disconnected", self.link))

    def finish(self) -> None:
        self._settled(("finish", self.link))


class WorkerHandoffs(Handoffs):
    """The pairing of a capture in several processes (module docstring)."""

    def __init__(self, workers: LinkWorkers) -> None:
        super().__init__([])
        self.workers = workers

    def decide(self, argv: list[bytes]) -> list[bytes]:
        return [*argv, UNLESS_EQUAL]

    def libraries(self) -> Mapping[bytes, bytes]:
        return self.workers.libraries

    def functions(self, argv: list[bytes]) -> None:
        access = Access(_no_key, 0)
        access.libraries = self.workers.libraries
        # A command the libraries refuse changes none; the workers apply it and raise its
        # error, naming the node and the offset.
        with contextlib.suppress(CommandError, MoonishError):
            cmd_function(access, 0, argv)

    def totals(self) -> dict[str, int]:
        counts = Counter(self.counts)
        for each in self.workers.migrations:
            counts.update(each)
        return dict(counts)


def _no_key(key: bytes) -> Any:
    raise AssertionError("FUNCTION reads no key")
