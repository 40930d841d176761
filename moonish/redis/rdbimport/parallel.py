"""``wal import-rdb --processes P``: the shards of an RDB import loaded in several processes.

The import reads the whole RDB file first, in its own process (its CRC-64 checked before
anything is written: moonish.redis.rdbimport.importer). Loading the keys into the shards
(images, records, appends) is the larger part of the work, and each shard's is its own, so
with ``P`` processes worker ``w`` loads the shards ``[w * N // P, (w + 1) * N // P)``
(moonish.slots ``shard_groups``). The workers are forked, so they share the read keys with the
importing process and nothing is pickled but their reports; but it is copy on write, and
since every shard's keys share memory pages and reading an object writes its reference
count, each worker ends up copying most pages: memory can grow by up to ``P`` times the keys'
size. Each shard's log is what one process writes, up to commit times; the processes agree on
the load's one first and one last row through memory they share (moonish.state.spread).

A worker that fails reports its error, which the import raises once every worker ended (the
lowest worker's); one that dies is an :class:`UnavailableError`. Every shard stores its
position on its load's last record, so a rerun loads what a failed worker did not.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from moonish.clock import Clock
from moonish.errors import UnavailableError
from moonish.log.writer import WriterOptions
from moonish.redis.rdb.contents import RdbContents
from moonish.redis.routing.shards import open_shard
from moonish.slots import shard_groups
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.config import StreamConfig
from moonish.state.shard import ShardWriter
from moonish.state.spread import RowOrder, SpreadLoad

Load = Callable[[ShardWriter, int, Callable[[int], None] | None, RowOrder | None], dict[str, Any]]
"""Loads one shard (the writer, its number, a progress callback, the order of the load's rows
over the processes); returns what it did: ``{"records": n, "ops": {op: n}}``."""


@dataclass(frozen=True, slots=True)
class LoadSetup:
    """What every worker needs: where the shards are, how to open them, what to load."""

    data_dir: str
    shards: int
    log: WriterOptions
    stream: StreamConfig
    clock: Clock
    contents: RdbContents
    snapshots: SnapshotPolicy | None = None
    rows: tuple[bool, ...] = ()
    """Per shard, whether the load writes ``r`` rows to it (moonish.state.spread)."""


def load_in_processes(
    setup: LoadSetup, processes: int, load: Load, progress: Callable[[int], None] | None
) -> list[dict[str, Any]]:
    """Run ``load`` on every shard of ``setup.data_dir`` (closed) in ``processes`` forked
    workers; per shard, what ``load`` returned. ``progress`` hears every worker's.

    Raises:
        What a worker raised (the lowest worker's), or UnavailableError: a worker died.
    """
    context = multiprocessing.get_context("fork")  # the workers share the read keys
    groups = shard_groups(setup.shards, processes)
    receivers: dict[Connection, int] = {}
    workers = []
    spread = SpreadLoad(context, len(groups))  # one first and one last row over them all
    for number, group in enumerate(groups):
        receive, send = context.Pipe(duplex=False)
        args = (setup, group, load, send, progress is not None, spread)
        worker = context.Process(target=_work, args=args, name=f"moonish-rdb-{number}", daemon=True)
        worker.start()
        send.close()
        receivers[receive] = number
        workers.append(worker)
    results: dict[int, tuple[str, Any]] = {}
    try:
        while len(results) < len(workers):
            for ready in wait(list(receivers)):
                assert isinstance(ready, Connection)
                number = receivers[ready]
                try:
                    kind, value = ready.recv()
                except EOFError:
                    workers[number].join()
                    kind, value = (
                        "error",
                        UnavailableError(
                            f"import worker {workers[number].name} ended without a report (exit "
                            f"code {workers[number].exitcode}); run the import again to continue"
                        ),
                    )
                if kind == "progress":
                    if progress is not None:
                        progress(value)
                    continue
                results[number] = (kind, value)
                del receivers[ready]
                ready.close()
    finally:
        for receive in receivers:
            receive.close()
        for worker in workers:
            worker.join()
    per_shard: list[dict[str, Any]] = [{} for _ in range(setup.shards)]
    for number in sorted(results):
        kind, value = results[number]
        if kind == "error":
            raise value
        for shard, done in value.items():
            per_shard[shard] = done
    return per_shard


def _work(
    setup: LoadSetup,
    group: range,
    load: Load,
    send: Connection,
    report_progress: bool,
    spread: SpreadLoad,
) -> None:
    """A worker: join the load, open its shards one by one, load each, sync it, report."""
    done: dict[int, dict[str, Any]] = {}
    progress = (lambda count: send.send(("progress", count))) if report_progress else None
    try:
        order = spread.join(1, sum(setup.rows[shard] for shard in group if setup.rows))
        for shard in group:
            with open_shard(
                setup.data_dir, shard, setup.log, setup.stream, setup.clock, setup.snapshots
            ) as writer:
                done[shard] = load(writer, shard, progress, order)
                writer.sync()
        send.send(("report", done))
    except BaseException as error:  # the importing process raises it
        with contextlib.suppress(OSError):
            send.send(("error", error))
    finally:
        send.close()
