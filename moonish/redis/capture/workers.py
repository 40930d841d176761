"""A live capture on several cores: worker processes write the shards, the capture's own
process reads the replication stream (moonish.redis.capture.runner, ``processes``).

The write path (Redis semantics, images, framing) is what bounds a capture, as it bounds an
import (docs/benchmarks.md §10, §11). With ``P`` processes, worker ``w`` writes the shards
``[w * N // P, (w + 1) * N // P)`` through a :class:`~moonish.redis.capture.apply.ShardApplier`
and holds stand-ins for the others. The capture's process connects, reads and splits the
stream, and sends each worker its part of every batch
(:class:`~moonish.redis.capture.apply.StreamRoute`: a one-key command to its shard's worker
only, the rest to all; pickled once), with where the batch leaves the stream; each worker runs
the commands of its own shards and skips the rest, as a parallel import's worker does
(moonish.redis.aof.parallel), and a command across shards of several workers goes through
their :class:`~moonish.redis.routing.exchange.PeerExchange`. So each shard's log is what a
capture in one process writes, up to commit times.

Acknowledgements: a worker (moonish.redis.capture.worker, the worker's side) reports how
far its shards are synced; the capture acknowledges the smallest offset over all workers
(``REPLCONF ACK``), and reads their reports as they come, so none waits on the other. A
full resync's RDB is spooled to a temporary file in the data directory
(``.resync-*.rdb``, removed after) that every worker reads, keeping its shards' keys.

Workers ignore SIGINT and SIGTERM: the capture stops them (they store positions, sync and
report). A worker that fails sends its error, which the capture raises; a worker that dies is
an :class:`UnavailableError`; a capture that dies closes the pipes, and the workers sync
what they applied and exit.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, BinaryIO, Protocol

from moonish.clock import Clock
from moonish.errors import UnavailableError
from moonish.log.writer import WriterOptions
from moonish.redis.capture.apply import ApplierCounts, ResumePoint, ShardApplier, StreamRoute
from moonish.redis.capture.status import CaptureOptions
from moonish.redis.capture.worker import Serve, WorkerShards, serve_stream
from moonish.redis.replication.resp import ReplCommand
from moonish.redis.routing.exchange import PeerExchange, PeerStoppedError
from moonish.redis.routing.shards import open_shard
from moonish.slots import shard_groups
from moonish.state.config import StreamConfig
from moonish.state.shadow import KeyspaceShard
from moonish.state.shard import ShardWriter
from moonish.state.spread import SpreadLoad


@dataclass(frozen=True, slots=True)
class Settled:
    """An applier's state after a synchronous step: the offset applied, the db the stream
    had selected there, and its counts."""

    applied: int
    db: int
    counts: ApplierCounts


class Batch:
    """A batch of the stream's commands as each applier gets it: whole (in this process),
    or split by :class:`~moonish.redis.capture.apply.StreamRoute` and pickled once, each
    worker's part for it."""

    __slots__ = ("_parts", "_route", "commands", "settled")

    def __init__(self, commands: list[ReplCommand], route: StreamRoute | None = None) -> None:
        self.commands = commands
        self._route = route
        self._parts: list[tuple[bytes, int]] | None = None
        self.settled = (-1, 0)
        """Where the batch leaves the stream (StreamRoute.split), once split."""

    def part(self, worker: int) -> tuple[bytes, int]:
        """Worker ``worker``'s commands pickled (plain tuples: a ``NamedTuple`` unpickles
        through a Python-level call each), and how many commands it does not get."""
        if self._parts is None:
            assert self._route is not None
            parts, dropped, end, db = self._route.split(self.commands)
            self.settled = (end, db)
            self._parts = [
                (pickle.dumps(part, pickle.HIGHEST_PROTOCOL), skipped)
                for part, skipped in zip(parts, dropped, strict=True)
            ]
        return self._parts[worker]


class Channel(Protocol):
    """The capture's side of one applier (in this process, or a worker)."""

    def start(self, point: ResumePoint) -> None: ...

    def full_resync(self, replid: str, offset: int, payload: BinaryIO | str, path: str) -> None:
        """``payload``: the RDB as a stream, or a file's path."""

    def continued(self, replid: str, previous_replid: str | None) -> None: ...

    def apply_batch(self, batch: Batch, path: str) -> None: ...

    def disconnected(self) -> None: ...

    def finish(self) -> None: ...

    def settle(self) -> Settled:
        """Wait until the applier has done every step given; its state then."""

    def durable(self) -> int:
        """The offset the applier's shards are known to be synced up to."""

    def counts(self) -> ApplierCounts:
        """What the applier did; per shard as of the last settled step (a worker's)."""

    def appended(self) -> int:
        """Records the applier appended, over its shards."""


class LocalChannel:
    """An applier in this process: every step runs at once."""

    def __init__(self, applier: ShardApplier) -> None:
        self.applier = applier

    def start(self, point: ResumePoint) -> None:
        self.applier.start(point)

    def full_resync(self, replid: str, offset: int, payload: BinaryIO | str, path: str) -> None:
        if isinstance(payload, str):
            with open(payload, "rb") as file:
                self.applier.full_resync(replid, offset, file, path)
        else:
            self.applier.full_resync(replid, offset, payload, path)

    def continued(self, replid: str, previous_replid: str | None) -> None:
        self.applier.continued(replid, previous_replid)

    def apply_batch(self, batch: Batch, path: str) -> None:
        self.applier.apply_batch(batch.commands, path)
        self.applier.tick()

    def disconnected(self) -> None:
        self.applier.disconnected()

    def finish(self) -> None:
        self.applier.finish()

    def settle(self) -> Settled:
        return Settled(self.applier.applied, self.applier.db, self.applier.counts)

    def durable(self) -> int:
        return self.applier.durable

    def counts(self) -> ApplierCounts:
        return self.applier.counts

    def appended(self) -> int:
        return sum(self.applier.counts.records)


class RemoteChannel:
    """A worker process: steps are sent through its pipe; its reports are read as they come
    (:meth:`durable`, :meth:`settle`)."""

    def __init__(self, link: Connection, process: Any, number: int) -> None:
        self.link, self.process, self.number = link, process, number
        self.seen = 0  # reports read
        self._durable = 0
        self._counts = ApplierCounts()  # per shard: as of the last settled step
        self.records = 0
        """Records the worker appended, as of its last report."""

    def _send(self, message: tuple[Any, ...]) -> None:
        self._send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))

    def _send_bytes(self, data: bytes) -> None:
        try:
            self.link.send_bytes(data)
        except OSError:  # it ended: what it said (its error), or that it died
            while True:
                self._receive()  # raises its error, or at the end of the pipe died()

    def start(self, point: ResumePoint) -> None:
        self._send(("start", point))

    def full_resync(self, replid: str, offset: int, payload: BinaryIO | str, path: str) -> None:
        assert isinstance(payload, str), "a worker reads a spooled copy of the RDB"
        self._send(("full", replid, offset, payload, path))

    def continued(self, replid: str, previous_replid: str | None) -> None:
        self._send(("continue", replid, previous_replid))

    def apply_batch(self, batch: Batch, path: str) -> None:
        pickled, dropped = batch.part(self.number)
        end, db = batch.settled
        self._send(("batch", pickled, path, self.seen, dropped, end, db))
        while self.link.poll():
            self._receive()

    def disconnected(self) -> None:
        self._send(("disconnected",))

    def finish(self) -> None:
        self._send(("finish",))

    def settle(self) -> Settled:
        while True:
            state = self._receive()
            if state is not None:
                return state

    def durable(self) -> int:
        return self._durable

    def counts(self) -> ApplierCounts:
        return self._counts

    def appended(self) -> int:
        return self.records

    def _receive(self) -> Settled | None:
        """Read one report: a settled state (returned), a durable offset, or an error
        (raised)."""
        try:
            kind, *values = self.link.recv()
        except (EOFError, OSError):
            raise self.died() from None
        self.seen += 1
        if kind == "error":
            raise values[0]
        if kind == "durable":  # (small: commands, transactions, records, rdb and removed keys)
            self._durable, totals = values
            counts = self._counts
            counts.commands, counts.transactions, self.records, *rest = totals
            counts.rdb_keys, counts.removed_keys = rest
            return None
        applied, db, self._durable, self._counts = values
        self.records = sum(self._counts.records)
        return Settled(applied, db, self._counts)

    def stop_sending(self) -> None:
        """Close the capture's side of the pipe for writing: the worker reads its end (it
        syncs what it applied and exits) and what it still sends can be read."""
        with contextlib.suppress(OSError):  # (closed already)
            sock = socket.socket(fileno=os.dup(self.link.fileno()))
            try:
                sock.shutdown(socket.SHUT_WR)
            finally:
                sock.close()

    def last_error(self) -> BaseException | None:
        """After the capture stopped on another worker's error: the error this worker sent
        (read until it ends; ``None`` if it sent none)."""
        self.stop_sending()
        try:
            while self.link.poll(10):
                kind, *values = self.link.recv()
                if kind == "error":
                    return values[0]  # type: ignore[no-any-return]
        except (EOFError, OSError):
            pass
        return None

    def died(self) -> UnavailableError:
        """The error for this worker's end (it died, or exited before it was told to)."""
        self.process.join(5)
        return UnavailableError(
            f"capture worker {self.process.name} ended (exit code {self.process.exitcode}); "
            "run the capture again to continue"
        )


class Workers:
    """The running workers: their channels, and their shards' stored positions."""

    def __init__(self, channels: list[RemoteChannel], owner: list[int]) -> None:
        self.channels: list[Channel] = list(channels)
        self.remote, self._shards = channels, len(owner)
        """The workers' channels, in worker order."""
        self.route = StreamRoute(owner, len(channels))
        """What each worker gets of the stream."""

    def positions(self, stop: threading.Event | None = None) -> list[dict[str, Any]] | None:
        """Every shard's stored position, as its worker read it once it rebuilt its shards'
        keyspaces; ``None`` when ``stop`` was set first (looked at every 0.1 s; the workers
        are then killed: a rebuild writes nothing).

        Raises:
            CorruptionError: a position moonish did not write (from its worker).
            UnavailableError: a worker died.
        """
        found: dict[int, dict[str, Any]] = {}
        for channel in self.remote:
            try:
                while not channel.link.poll(0.1):
                    if stop is not None and stop.is_set():
                        for each in self.remote:
                            each.process.kill()
                        return None
                kind, value = channel.link.recv()
            except (EOFError, OSError):
                raise channel.died() from None
            if kind == "error":  # (not a report: the credit counts those)
                raise value
            found.update(value)
        return [found[shard] for shard in range(self._shards)]


@contextlib.contextmanager
def start_workers(
    data_dir: str,
    shards: int,
    processes: int,
    log: WriterOptions,
    stream: StreamConfig,
    options: CaptureOptions,
    clock: Clock,
    serve: Serve | None = None,
) -> Iterator[Workers]:
    """Start ``processes`` workers on the (closed) shards of ``data_dir`` for the block;
    after it, they are told to stop (if still waiting) and joined. ``serve``: what each
    worker runs once its shards are open (default: one stream's applier, as
    :func:`serve_stream`; a cluster capture's links: moonish.redis.cluster.workers)."""
    context = multiprocessing.get_context("fork")  # inherit the settings, no pickling
    owner = [w for w, group in enumerate(shard_groups(shards, processes)) for _ in group]
    spread = SpreadLoad(context, processes)  # one first and one last row per full resync
    links: dict[tuple[int, int], Connection] = {}
    for a in range(processes):
        for b in range(a + 1, processes):
            links[a, b], links[b, a] = context.Pipe()
    channels: list[RemoteChannel] = []
    try:
        for number in range(processes):  # (a failure here: the finally below stops them)
            mine, theirs = context.Pipe()
            peers = {peer: links[number, peer] for peer in range(processes) if peer != number}
            others = [end for pair, end in links.items() if pair[0] != number]
            others += [mine, *(channel.link for channel in channels)]  # the capture's ends
            setup = _Setup(data_dir, shards, owner, number, log, stream, options, clock, spread)
            process = context.Process(
                target=_work,
                args=(setup, peers, theirs, others, serve or serve_stream),
                name=f"moonish-capture-{number}",
                daemon=True,
            )
            process.start()
            theirs.close()
            channels.append(RemoteChannel(mine, process, number))
        for end in links.values():  # only the workers hold them now: a dead peer reads as EOF
            end.close()
        yield Workers(channels, owner)
    except PeerStoppedError:  # the worker that stopped first says why
        for channel in channels:
            cause = channel.last_error()
            if cause is not None and not isinstance(cause, PeerStoppedError):
                raise cause from None
            if cause is None and (channel.process.exitcode or 0) < 0:  # killed
                raise channel.died() from None
        raise
    finally:
        for end in links.values():  # (idempotent)
            end.close()
        for channel in channels:  # every worker syncs and exits at once
            channel.stop_sending()
        deadline = time.monotonic() + 30
        for channel in channels:
            channel.process.join(max(0.0, deadline - time.monotonic()))
            if channel.process.is_alive():
                channel.process.kill()
                channel.process.join()
            channel.link.close()


@dataclass(frozen=True, slots=True)
class _Setup:
    data_dir: str
    shards: int
    owner: list[int]
    number: int
    log: WriterOptions
    stream: StreamConfig
    options: CaptureOptions
    clock: Clock
    spread: SpreadLoad


def _work(
    setup: _Setup,
    peers: dict[int, Connection],
    link: Connection,
    others: list[Connection],
    serve: Serve,
) -> None:
    """A worker: open its shards, stand in for the others, run ``serve``.
    ``others``: the pipe ends it inherited that are not its own, closed first, so that an
    end of a pipe reads as such when the process at its other end is gone."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    for end in others:
        end.close()
    writers: list[ShardWriter] = []
    owned = {shard for shard in range(setup.shards) if setup.owner[shard] == setup.number}
    try:
        for shard in range(setup.shards):
            if shard in owned:
                writers.append(
                    open_shard(
                        setup.data_dir,
                        shard,
                        setup.log,
                        setup.stream,
                        setup.clock,
                        setup.options.snapshots,
                    )
                )
            else:
                writers.append(KeyspaceShard(setup.stream, setup.clock))
        exchange = PeerExchange(setup.owner, setup.number, peers, setup.stream, setup.clock)
        shards = WorkerShards(writers, owned, exchange, setup.options, setup.clock, setup.spread)
        serve(shards, link)
    except BaseException as error:  # the capture raises it
        with contextlib.suppress(OSError):
            link.send(("error", error))
    finally:
        for writer in writers:
            with contextlib.suppress(BaseException):  # the first error is the one reported
                writer.close()
        for peer in peers.values():
            peer.close()
        link.close()


def remove_spools(data_dir: str) -> None:
    """Remove the full resyncs' copies a capture that was killed left in ``data_dir``."""
    for name in os.listdir(data_dir):
        if name.startswith(".resync-") and name.endswith(".rdb"):
            os.unlink(os.path.join(data_dir, name))


@contextlib.contextmanager
def spooled(data_dir: str, payload: BinaryIO) -> Iterator[str]:
    """A full resync's RDB copied from ``payload`` to a temporary file in ``data_dir``
    (``.resync-*.rdb``) for the workers to read; its path for the block, removed after."""
    with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".resync-", suffix=".rdb") as spool:
        shutil.copyfileobj(payload, spool, 1 << 20)
        spool.flush()
        yield spool.name
