"""A first ``import-aof`` into several shards on several cores: one process per group of shards.

The write path (Redis semantics, images, encoding, framing) costs a CPython process about
25 µs per command (docs/benchmarks.md §9), so one core bounds an import. With ``processes``
``P > 1`` (``moonish wal import-aof --processes P``), :func:`run_workers` forks ``P`` worker
processes; worker ``w`` writes the shards ``[w * N // P, (w + 1) * N // P)``. Every worker reads
the whole AOF (parsing is a small part of the cost) and runs the commands of its own shards
only: the others' shards are skipped as a resumed import skips a shard that holds a command
already (moonish.redis.router), so each shard's log is exactly what a one-process import
writes, up to commit times (each process reads the clock itself).

A command whose keys live in shards of different workers (``RENAME a b``, ``SMOVE``, ``COPY``,
``MSETNX``, ``SUNIONSTORE``...: moonish.redis.router ``run_across``) meets every involved worker
at the same point of the AOF, since each reads all of it. The lowest involved worker leads
(:class:`PeerExchange`): each other one sends it the entries of the command's keys that its
shards hold (in every db: ``COPY ... DB n``), then waits; the leader puts them in stand-in
shards (moonish.state.shadow), runs the command on all the keys, and sends each worker back
the reply, its shards' records and its keys' new entries, which it stores before going on.
Each worker appends its records as one process would. ``SORT ... BY/GET`` reads keys it cannot
name in advance, so an AOF holding ``SORT`` is imported by one process (moonish.redis.importer
decides before starting).

Only a first import runs in parallel (every shard empty; the parent checked and created the
data directory and ``source.json`` and holds no shard while the workers run); a rerun, a resumed
import or a resync runs in one process. A worker that fails (a command Redis would refuse, an
unsupported command) stops there, and so does every worker that next needs it for a command
across shards; the lowest worker's error is raised once all have ended. Every shard's log
then ends at a command boundary with its position, so a rerun continues as after a
one-process failure. The caller's progress callback hears worker 0's progress.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from moonish.clock import Clock
from moonish.errors import UnavailableError
from moonish.redis.import_shards import open_shard
from moonish.redis.importer import ImportReport, Setup, replay_aof
from moonish.redis.router import Router
from moonish.redis.slots import shard_groups, shard_of_key
from moonish.state.cmd_sort import pattern_keys
from moonish.state.config import StreamConfig
from moonish.state.execute import keys_of
from moonish.state.shadow import KeyspaceShard
from moonish.state.shard import Prepared, ShardWriter
from moonish.state.values import Entry

Lent = list[tuple[int, bytes, Entry | None]]
"""``(db, key, entry or None)``: keys as a worker's shards hold them."""


def run_workers(
    setup: Setup, data_dir: str, processes: int, progress: Callable[[int], None] | None
) -> ImportReport:
    """Import ``setup.paths`` into the (empty, closed) shards of ``data_dir`` with
    ``processes`` worker processes; returns the merged report.

    Raises:
        What a worker raised (the lowest worker's error; see the module docstring), or
        UnavailableError: a worker died without a report (killed).
    """
    context = multiprocessing.get_context("fork")  # the workers inherit setup, no pickling
    shards = setup.shards
    groups = shard_groups(shards, processes)
    links: dict[tuple[int, int], Connection] = {}  # (this worker, peer) -> this worker's end
    for a in range(processes):
        for b in range(a + 1, processes):
            links[a, b], links[b, a] = context.Pipe()
    results, workers = [], []
    for number in range(processes):
        receive, send = context.Pipe(duplex=False)
        peers = {peer: links[number, peer] for peer in range(processes) if peer != number}
        worker = context.Process(
            target=_work, args=(setup, data_dir, groups, number, peers, send,
                                number == 0 and progress is not None),
            name=f"moonish-import-{number}", daemon=True,
        )  # fmt: skip
        worker.start()
        send.close()
        results.append(receive)
        workers.append(worker)
    for end in links.values():  # only the workers hold them now: a dead peer reads as EOF
        end.close()
    outcomes = [
        _result(receive, worker, progress if number == 0 else None)
        for number, (receive, worker) in enumerate(zip(results, workers, strict=True))
    ]
    for worker in workers:
        worker.join()
    for kind, value in outcomes:
        if kind == "error":
            raise value
    return _merge([value for _, value in outcomes], groups)


def _result(
    receive: Connection, worker: Any, progress: Callable[[int], None] | None
) -> tuple[str, Any]:
    """The worker's ``("report", ImportReport)`` or ``("error", exception)``; calls
    ``progress`` with the worker's progress messages on the way."""
    try:
        while True:
            kind, value = receive.recv()
            if kind != "progress":
                return kind, value
            if progress is not None:
                progress(value)
    except EOFError:
        worker.join()
        return "error", UnavailableError(
            f"import worker {worker.name} ended without a report (exit code "
            f"{worker.exitcode}); run the import again to continue"
        )
    finally:
        receive.close()


class PeerStoppedError(UnavailableError):
    """Another worker ended before a command across shards was complete (its own error, if
    it had one, is the one to report)."""


class PeerExchange:
    """A worker's side of commands across shards of several workers (module docstring), of
    an import or a live capture (moonish.redis.capture_workers).

    Args:
        owner: the worker writing each shard.
        number: this worker's.
        peers: a connection to each other worker.
        stream, clock: the stream configuration and clock of stand-in shards.
    """

    def __init__(
        self, owner: list[int], number: int, peers: dict[int, Connection], stream: StreamConfig,
        clock: Clock,
    ) -> None:  # fmt: skip
        self.owner, self.number, self.peers = owner, number, peers
        self.stream, self.clock = stream, clock

    def owns_all(self, shards: list[int]) -> bool:
        return all(self.owner[shard] == self.number for shard in shards)

    def across(
        self, router: Router, db: int, argv: list[bytes], now_us: int, shards: list[int]
    ) -> list[tuple[int, Prepared]]:
        count = len(router.writers)
        workers = sorted({self.owner[shard] for shard in shards})
        keys = set(keys_of(argv))
        if argv[0].upper() == b"SORT":  # BY/GET patterns read keys of any worker: all lend
            workers = sorted(set(self.owner))
            keys |= self._pattern_keys(router, db, argv)
        if self.number not in workers:  # none of its shards: the others run it
            return []
        if workers[0] != self.number:  # lend this worker's keys, take back what happened
            link = self.peers[workers[0]]
            _send(link, _lend(router.writers, keys, self.owner, self.number))
            reply, records, after = _receive(link)
            for key_db, key, entry in after:
                keyspace = router.writers[shard_of_key(key, count)].keyspace
                if entry is None:
                    keyspace.remove(key_db, key)
                else:
                    keyspace.put(key_db, key, entry)
            return [(shard, Prepared(reply, [], records[shard])) for shard in records]
        writers = list(router.writers)  # the other workers' shards: stand-ins with their keys
        lent: dict[int, Lent] = {}
        for peer in workers[1:]:
            lent[peer] = _receive(self.peers[peer])
            for key_db, key, entry in lent[peer]:
                shard = shard_of_key(key, count)
                if writers[shard] is router.writers[shard]:
                    writers[shard] = KeyspaceShard(self.stream, self.clock)
                if entry is not None:
                    writers[shard].keyspace.put(key_db, key, entry)
        results = router.run_across(db, argv, now_us, shards, writers)
        reply = results[0][1].reply if results else None
        for peer in workers[1:]:
            theirs = {shard: prepared.records for shard, prepared in results
                      if self.owner[shard] == peer}  # fmt: skip
            _send(self.peers[peer], (reply, theirs, _after(lent[peer], writers)))
        return [(shard, prepared) for shard, prepared in results
                if self.owner[shard] == self.number]  # fmt: skip

    def _pattern_keys(self, router: Router, db: int, argv: list[bytes]) -> set[bytes]:
        """The keys in db ``db`` of this worker's shards that ``SORT``'s patterns may read."""
        reads = pattern_keys(argv)
        found: set[bytes] = set()
        for shard, writer in enumerate(router.writers):
            if self.owner[shard] == self.number:
                found.update(filter(reads, writer.keyspace.dbs.get(db, {})))
        return found


def _lend(writers: list[ShardWriter], keys: set[bytes], owner: list[int], number: int) -> Lent:
    """The entries of ``keys`` in this worker's shards, in every db (``None``: in none)."""
    count, lent = len(writers), []  # type: int, Lent
    for key in keys:
        shard = shard_of_key(key, count)
        if owner[shard] == number:
            dbs = writers[shard].keyspace.dbs
            found: Lent = [(db, key, keys_in[key]) for db, keys_in in dbs.items() if key in keys_in]
            lent += found or [(0, key, None)]  # named even when in no db: its shard is lent
    return lent


def _after(lent: Lent, writers: list[ShardWriter]) -> Lent:
    """The lent keys' entries now, in every db where they were or now are (a command may
    move or copy a key to another db)."""
    count, after = len(writers), []  # type: int, Lent
    for key in {key for _, key, _ in lent}:
        dbs = writers[shard_of_key(key, count)].keyspace.dbs
        where = {db for db, k, _ in lent if k == key} | {db for db in dbs if key in dbs[db]}
        after += [(db, key, dbs.get(db, {}).get(key)) for db in sorted(where)]
    return after


def _receive(link: Connection) -> Any:
    """The next message from a peer.

    Raises:
        PeerStoppedError: the peer ended (it failed: its error is the one reported).
    """
    try:
        return link.recv()
    except (EOFError, OSError):  # (a peer gone with unread data resets the pipe)
        raise PeerStoppedError(
            "another worker stopped before a command across shards was complete"
        ) from None


def _send(link: Connection, message: Any) -> None:
    """Send ``message`` to a peer.

    Raises:
        PeerStoppedError: the peer ended.
    """
    try:
        link.send(message)
    except OSError:
        raise PeerStoppedError(
            "another worker stopped before a command across shards was complete"
        ) from None


def _work(
    setup: Setup, data_dir: str, groups: list[range], number: int,
    peers: dict[int, Connection], send: Connection, report_progress: bool,
) -> None:  # fmt: skip
    """A worker: open its shards, stand in for the others, replay, report."""
    writers: list[ShardWriter] = []
    owner = [w for w, group in enumerate(groups) for _ in group]
    try:
        for shard in range(setup.shards):
            if owner[shard] == number:
                writers.append(open_shard(data_dir, shard, setup.log, setup.stream, setup.clock))
            else:
                writers.append(KeyspaceShard(setup.stream, setup.clock))
        progress = (lambda count: send.send(("progress", count))) if report_progress else None
        others = frozenset(shard for shard in range(setup.shards) if owner[shard] != number)
        exchange = PeerExchange(owner, number, peers, setup.stream, setup.clock)
        report = replay_aof(setup.paths, writers, setup.clock, setup.skip_unsupported, progress,
                            exchange=exchange, others=others)  # fmt: skip
        for writer in writers:
            writer.close()
        send.send(("report", report))
    except BaseException as error:  # the parent raises it
        for writer in writers:
            with contextlib.suppress(BaseException):  # the first error is the one to report
                writer.close()
        send.send(("error", error))
    finally:
        for link in peers.values():
            link.close()
        send.close()


def _merge(reports: list[ImportReport], groups: list[range]) -> ImportReport:
    """One report: what every worker saw alike (commands, files, position) from worker 0;
    each shard's records, LSN range and previous position from the worker that wrote it."""
    merged = reports[0]
    for report, own in zip(reports, groups, strict=True):
        for shard in own:
            merged.per_shard[shard] = report.per_shard[shard]
            merged.lsn_ranges[shard] = report.lsn_ranges[shard]
            merged.resumed_from[shard] = report.resumed_from[shard]
    merged.records = sum(merged.per_shard)
    return merged
