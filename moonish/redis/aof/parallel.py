"""A first ``import-aof`` into several shards on several cores: one process per group of shards.

The write path (Redis semantics, images, encoding, framing) is what bounds an import in one
CPython process to one core (docs/benchmarks.md §10 measures it). With ``processes`` ``P > 1``
(``moonish wal import-aof --processes P``), :func:`run_workers` forks ``P`` worker processes;
worker ``w`` writes the shards ``[w * N // P, (w + 1) * N // P)``. Every worker reads the whole
AOF (parsing is a small part of the cost) and runs the commands of its own shards only: the
others' shards are skipped as a resumed import skips a shard that holds a command already
(moonish.redis.routing.router), so each shard's log is exactly what a one-process import
writes, up to commit times (each process reads the clock itself).

A command whose keys live in shards of different workers meets every involved worker at the
same point of the AOF, since each reads all of it; they settle it through
moonish.redis.routing.exchange. ``SORT ... BY/GET`` reads keys it cannot name in advance, so
an AOF holding ``SORT`` is imported by one process (moonish.redis.aof.importer decides before
starting).

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
from collections import Counter
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from moonish.errors import UnavailableError
from moonish.redis.aof.replay import ImportReport, Setup, replay_aof
from moonish.redis.routing.exchange import PeerExchange
from moonish.redis.routing.keyfilter import KeyFilter
from moonish.redis.routing.shards import open_shard
from moonish.slots import shard_groups
from moonish.state.shadow import KeyspaceShard
from moonish.state.shard import ShardWriter


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
            target=_work,
            args=(
                setup,
                data_dir,
                groups,
                number,
                peers,
                send,
                number == 0 and progress is not None,
            ),
            name=f"moonish-import-{number}",
            daemon=True,
        )
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


def _work(
    setup: Setup,
    data_dir: str,
    groups: list[range],
    number: int,
    peers: dict[int, Connection],
    send: Connection,
    report_progress: bool,
) -> None:
    """A worker: open its shards, stand in for the others, replay, report."""
    writers: list[ShardWriter] = []
    owner = [w for w, group in enumerate(groups) for _ in group]
    try:
        for shard in range(setup.shards):
            if owner[shard] == number:
                writers.append(
                    open_shard(
                        data_dir, shard, setup.log, setup.stream, setup.clock, setup.snapshots
                    )
                )
            else:
                writers.append(KeyspaceShard(setup.stream, setup.clock))
        progress = (lambda count: send.send(("progress", count))) if report_progress else None
        others = frozenset(shard for shard in range(setup.shards) if owner[shard] != number)
        exchange = PeerExchange(owner, number, peers, setup.stream, setup.clock)
        report = replay_aof(
            setup.paths,
            writers,
            setup.clock,
            setup.skip_unsupported,
            progress,
            exchange=exchange,
            others=others,
            key_filter=KeyFilter(setup.key_filter),
        )
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
    # Every worker filters every command alike, but loads only its own shards' RDB keys.
    merged.filtered = Counter(
        {rule: count for rule, count in merged.filtered.items() if not rule.startswith("keys:")}
    )
    for report in reports:
        merged.filtered.update(
            {rule: count for rule, count in report.filtered.items() if rule.startswith("keys:")}
        )
    return merged
