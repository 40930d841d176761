"""How a capture in several processes shares the stream (moonish.redis.capture.apply,
moonish.redis.routing.exchange), without a server: each worker gets its commands and where the
stream stands, and a resumed command across workers is decided alike in each."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest

from moonish.clock import SYSTEM_CLOCK
from moonish.redis.capture.apply import ResumePoint, ShardApplier, StreamRoute
from moonish.redis.capture.status import CaptureOptions
from moonish.redis.replication.resp import ReplCommand
from moonish.redis.routing.exchange import PeerExchange
from moonish.redis.routing.router import ResumeError
from moonish.slots import shard_of_key
from moonish.state.config import StreamConfig
from moonish.state.shadow import KeyspaceShard
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import Entry


def test_the_route_gives_each_worker_its_commands_and_where_the_stream_stands() -> None:
    owner = [0, 0, 1, 1]
    key = {
        shard: next(
            f"k{i}".encode() for i in range(999) if shard_of_key(f"k{i}".encode(), 4) == shard
        )
        for shard in range(4)
    }
    route = StreamRoute(owner, 2)
    stream = [
        [b"SET", key[0], b"1"],
        [b"SELECT", b"3"],
        [b"INCR", key[3]],
        [b"PING"],
        [b"MSET", key[0], b"a", key[3], b"b"],
        [b"MULTI"],
        [b"SET", key[2], b"x"],
    ]
    first = [ReplCommand(i * 10, i * 10 + 10, argv) for i, argv in enumerate(stream)]
    parts, dropped, end, db = route.split(first)
    assert [argv for _, _, argv in parts[0]] == [
        stream[0],
        stream[1],
        stream[4],
        stream[5],
        stream[6],
    ]
    assert [argv for _, _, argv in parts[1]] == [stream[1], stream[2], *stream[4:]]
    assert dropped == [1, 1]  # INCR, SET: another worker's alone; PING: nobody's
    assert (end, db) == (50, 3)  # the MULTI is open after 50
    second = [
        ReplCommand(70, 80, [b"SELECT", b"5"]),
        ReplCommand(80, 90, [b"EXEC"]),
        ReplCommand(90, 100, [b"SET", key[1], b"y"]),
    ]
    parts, dropped, end, db = route.split(second)
    assert [len(part) for part in parts] == [3, 2] and dropped == [0, 1]
    assert (end, db) == (100, 5)
    route.reset(0)
    parts, dropped, end, db = route.split([ReplCommand(100, 110, [b"PING"])])
    assert parts == [[], []] and dropped == [0, 0] and (end, db) == (110, 0)


@pytest.mark.parametrize(
    ("stored", "outcome"),
    [((10, 10), "runs"), ((20, 20), "skipped"), ((20, 10), "refused"), ((10, 20), "refused")],
)
def test_a_resumed_command_across_workers_is_decided_alike_in_each(
    tmp_path: Path, stored: tuple[int, int], outcome: str
) -> None:
    """Two workers (shard 0 and shard 1) resume with their shards at the stored offsets;
    ``RENAME a b`` (keys of both) ends at 20: every worker skips it, runs it through the
    exchange, or refuses it, alike (never one alone, waiting for the other forever)."""
    keys = {shard_of_key(key, 2): key for key in (b"a", b"b", b"c", b"d")}
    a, b = keys[0], keys[1]
    left, right = multiprocessing.Pipe()
    clock = SYSTEM_CLOCK
    appliers = []
    for number, peer in ((0, left), (1, right)):
        writers: list[ShardWriter] = [KeyspaceShard(StreamConfig(), clock) for _ in range(2)]
        writers[number] = ShardWriter(
            tmp_path / f"shard-{number}", ShardOptions(expiry_sweep_ms=0), clock
        )
        writers[number].keyspace.put(0, a if number == 0 else b"other", Entry("string", b"v"))
        exchange = PeerExchange([0, 1], number, {1 - number: peer}, StreamConfig(), clock)
        applier = ShardApplier(writers, {number}, CaptureOptions(), clock, exchange)
        applier.start(ResumePoint("f" * 40, min(stored), 0, list(stored)))
        appliers.append(applier)
    batch = [ReplCommand(10, 20, [b"RENAME", a, b])]
    results: list[Any] = [None, None]

    def run(number: int) -> None:
        try:
            appliers[number].apply_batch(batch, "redis://test")
            results[number] = "done"
        except Exception as error:
            results[number] = error

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads), "a worker waits for the other"
    if outcome == "refused":
        assert all(isinstance(result, ResumeError) for result in results), results
    else:
        assert results == ["done", "done"]
        moved = appliers[1].writers[1].keyspace.get(0, b) is not None
        assert moved == (outcome == "runs")
        assert (appliers[0].writers[0].keyspace.get(0, a) is None) == (outcome == "runs")
    for applier in appliers:
        for writer in applier.writers:
            writer.close()
