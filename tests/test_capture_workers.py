"""A live capture in several processes (``capture(..., processes=P)``, ``moonish wal capture
--processes``; moonish.redis.capture.workers) against a real redis-server each test starts on
127.0.0.1: the same change stream as one process (commands across workers' shards and SORT's
BY/GET patterns included), and a worker's error or death stops the capture with it."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from moonish.clock import SYSTEM_CLOCK
from moonish.errors import UnavailableError, UnsupportedFormatError, WriterLockedError
from moonish.redis.capture.apply import ResumePoint, ShardApplier, StreamRoute
from moonish.redis.capture.runner import capture
from moonish.redis.capture.status import CaptureOptions
from moonish.redis.replication.resp import ReplCommand
from moonish.redis.routing.exchange import PeerExchange
from moonish.redis.routing.router import ResumeError
from moonish.slots import shard_of_key
from moonish.state.config import StreamConfig
from moonish.state.shadow import KeyspaceShard
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import Entry
from tests.redis_server import redis_server, shard_writer
from tests.test_capture import (
    Running,
    client_of,
    events,
    every_type,
    our_state,
    redis_state,
    url_of,
    wait_for,
)

TIMES = ("ts_ms", "ts_us", "ts_ns")


def comparable_events(data_dir: Path) -> list[list[dict[str, Any]]]:
    """Each shard's envelopes without what differs between two captures of one stream:
    times, and LSNs and transaction IDs (position markers, written on a timer, take LSNs)."""
    shards: list[list[dict[str, Any]]] = []
    for envelope in events(data_dir):
        shard = envelope["source"]["shard"]
        while len(shards) <= shard:
            shards.append([])
        for field in TIMES:
            envelope.pop(field)
            envelope["source"].pop(field)
        envelope["source"].pop("lsn")
        if envelope["transaction"] is not None:
            envelope["transaction"].pop("id")
        shards[shard].append(envelope)
    return shards


def across_workers(client: redis.Redis, rng: random.Random, count: int) -> None:
    """Commands whose keys live in shards of different workers (no hash tags), SORT with
    BY/GET patterns whose keys are anywhere, and FLUSHDB-free keyless commands."""
    for i in range(count):
        a, b = f"x{rng.randrange(60)}", f"y{rng.randrange(60)}"
        choice = rng.randrange(7)
        if choice == 0:
            client.mset({a: i, b: i + 1})
        elif choice == 1:
            client.set(a, i)
            client.rename(a, b)
        elif choice == 2:
            client.sadd(f"s{a}", i % 7)
            client.smove(f"s{a}", f"s{b}", i % 7)
        elif choice == 3:
            client.rpush(f"l{a}", i)
            client.lmove(f"l{a}", f"l{b}")
        elif choice == 4:
            client.sunionstore(f"u{i % 5}", [f"s{a}", f"s{b}"])
        elif choice == 5:
            client.copy(a, f"c{b}", replace=True)
        else:
            client.rpush("ids", i % 9)
            client.set(f"weight_{i % 9}", rng.randrange(100))
            client.hset(f"obj_{i % 9}", "name", f"n{i}")
            client.sort("ids", by="weight_*", get=["#", "obj_*->name"], store=f"sorted{i % 3}")


def test_several_processes_write_the_change_stream_of_one(tmp_path: Path) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with (redis_server(workdir) as client, Running(client, tmp_path / "one", 4) as one,
          Running(client, tmp_path / "two", 4, processes=2) as two):  # fmt: skip
        one.caught_up(client)
        two.caught_up(client)
        rng = random.Random(11)
        every_type(client, rng, 800, "1", live=True)
        across_workers(client, rng, 400)
        one.caught_up(client)
        two.caught_up(client)
        expected = redis_state(client)
        first, second = one.finish(), two.finish()
    assert our_state(tmp_path / "two") == expected == our_state(tmp_path / "one")
    assert comparable_events(tmp_path / "two") == comparable_events(tmp_path / "one")
    assert second.commands == first.commands and second.transactions == first.transactions
    assert second.durable_offset == first.durable_offset
    assert sum(second.per_shard) == second.records
    assert all(second.per_shard)  # every worker wrote its shards


def test_a_full_resync_loads_each_workers_shards(tmp_path: Path) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with redis_server(workdir) as client:
        rng = random.Random(3)
        every_type(client, rng, 500, "1", live=False)
        with Running(client, tmp_path / "data", 3, processes=3) as running:
            running.caught_up(client)
            across_workers(client, rng, 100)
            running.caught_up(client)
            expected = redis_state(client)
            report = running.finish()
    assert our_state(tmp_path / "data") == expected
    assert report.full_resyncs == 1 and report.rdb_keys > 0
    rows = [e for e in events(tmp_path / "data") if e["op"] == "r"]
    assert len(rows) == report.rdb_keys
    assert not [path for path in os.listdir(tmp_path / "data") if path.startswith(".resync-")]


def test_a_workers_error_stops_the_capture_with_its_offset(tmp_path: Path) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with (redis_server(workdir, "--databases", "70000") as client,
          Running(client, tmp_path / "data", 2, processes=2) as running):  # fmt: skip
        running.caught_up(client)
        client.set("before", 1)
        far = client_of(client, 65536)  # more than moonish keeps (0..65535)
        far.set("k", 1)
        far.close()
        wait_for(lambda: bool(running.result), "the capture to fail")
        with pytest.raises(UnsupportedFormatError, match="bad SELECT") as failure:
            running.finish()
    assert failure.value.path == url_of(client)  # the master, and where in its stream
    assert failure.value.offset is not None and failure.value.offset > 0
    assert not multiprocessing.active_children()  # the workers ended with it


def test_a_worker_that_dies_stops_the_capture(tmp_path: Path) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with (redis_server(workdir) as client,
          Running(client, tmp_path / "data", 4, processes=2) as running):  # fmt: skip
        running.caught_up(client)
        (worker,) = [child for child in multiprocessing.active_children()
                     if child.name == "moonish-capture-1"]  # fmt: skip
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGKILL)
        for i in range(100):
            client.set(f"key{i}", i)
        wait_for(lambda: bool(running.result), "the capture to fail")
        with pytest.raises(UnavailableError, match="capture worker moonish-capture-1 ended"):
            running.finish()
    assert not multiprocessing.active_children()


def test_a_locked_shard_stops_a_capture_in_several_processes_before_it_starts(
    tmp_path: Path,
) -> None:
    """The capture's process opens every shard before it forks (the source check): a shard
    another process writes is refused there, no worker is left, and a rerun works."""
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with redis_server(workdir) as client:
        client.set("a", 1)
        with Running(client, tmp_path / "data", 4) as running:  # the directory, 4 shards
            running.caught_up(client)
            running.finish()
        with shard_writer(tmp_path / "data" / "shard-3"), pytest.raises(WriterLockedError):
            capture(url_of(client), tmp_path / "data", 4, processes=2)
        assert not multiprocessing.active_children()
        with Running(client, tmp_path / "data", 4, processes=2) as running:  # then it runs
            client.set("b", 2)
            running.caught_up(client)
            expected = redis_state(client, (0,))
            report = running.finish()
    assert report.continues == 1 and our_state(tmp_path / "data") == expected


def test_the_route_gives_each_worker_its_commands_and_where_the_stream_stands() -> None:
    owner = [0, 0, 1, 1]
    key = {shard: next(f"k{i}".encode() for i in range(999) if shard_of_key(f"k{i}".encode(),
           4) == shard) for shard in range(4)}  # fmt: skip
    route = StreamRoute(owner, 2)
    stream = [
        [b"SET", key[0], b"1"], [b"SELECT", b"3"], [b"INCR", key[3]], [b"PING"],
        [b"MSET", key[0], b"a", key[3], b"b"], [b"MULTI"], [b"SET", key[2], b"x"],
    ]  # fmt: skip
    first = [ReplCommand(i * 10, i * 10 + 10, argv) for i, argv in enumerate(stream)]
    parts, dropped, end, db = route.split(first)
    assert [argv for _, _, argv in parts[0]] == [stream[0], stream[1], stream[4], stream[5],
                                                 stream[6]]  # fmt: skip
    assert [argv for _, _, argv in parts[1]] == [stream[1], stream[2], *stream[4:]]
    assert dropped == [1, 1]  # INCR, SET: another worker's alone; PING: nobody's
    assert (end, db) == (50, 3)  # the MULTI is open after 50
    second = [ReplCommand(70, 80, [b"SELECT", b"5"]), ReplCommand(80, 90, [b"EXEC"]),
              ReplCommand(90, 100, [b"SET", key[1], b"y"])]  # fmt: skip
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
        writers[number] = ShardWriter(tmp_path / f"shard-{number}",
                                      ShardOptions(expiry_sweep_ms=0), clock)  # fmt: skip
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
