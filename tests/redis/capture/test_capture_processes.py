"""A live capture in several processes (``capture(..., processes=P)``, ``moonish wal capture
--processes``; moonish.redis.capture.workers) against a real redis-server each test starts on
127.0.0.1: the same change stream as one process (commands across workers' shards and SORT's
BY/GET patterns included), and a worker's error or death stops the capture with it."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

import moonish
from moonish.errors import UnavailableError, UnsupportedFormatError, WriterLockedError
from moonish.redis.capture.runner import capture
from tests.support.redis.capture import (
    Running,
    client_of,
    events,
    every_type,
    our_state,
    redis_state,
    url_of,
    wait_for,
)
from tests.support.servers.redis_server import redis_server, shard_writer

pytestmark = pytest.mark.redis

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
    with (
        redis_server(workdir) as client,
        Running(client, tmp_path / "one", 4) as one,
        Running(client, tmp_path / "two", 4, processes=2) as two,
    ):
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


def test_a_full_resync_over_workers_reads_as_one_snapshot_with_one_first_and_one_last(
    tmp_path: Path,
) -> None:
    """The workers load their shards at once; a merged read over every shard still shows the
    load as one snapshot: one ``"first"`` row, one ``"last"`` (moonish.state.spread)."""
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with redis_server(workdir) as client:
        for start in range(0, 6000, 1000):
            client.mset({f"key:{i}": i for i in range(start, start + 1000)})
        with Running(client, tmp_path / "data", 4, processes=3) as running:
            running.caught_up(client)
            report = running.finish()
    assert report.full_resyncs == 1 and report.rdb_keys == 6000
    merged = moonish.read(str(tmp_path / "data"), "earliest", limit=10_000)
    marks = [
        envelope["source"]["snapshot"]
        for envelope in (orjson.loads(event.envelope) for event in merged.events)
        if envelope["op"] == "r"
    ]
    assert len(marks) == 6000
    assert (marks[0], marks[-1]) == ("first", "last")
    assert marks.count("first") == 1 and marks.count("last") == 1
    assert marks.count("first_in_data_collection") == 3 == marks.count("last_in_data_collection")


def test_a_workers_error_stops_the_capture_with_its_offset(tmp_path: Path) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with (
        redis_server(workdir, "--databases", "70000") as client,
        Running(client, tmp_path / "data", 2, processes=2) as running,
    ):
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
    with (
        redis_server(workdir) as client,
        Running(client, tmp_path / "data", 4, processes=2) as running,
    ):
        running.caught_up(client)
        (worker,) = [
            child
            for child in multiprocessing.active_children()
            if child.name == "moonish-capture-1"
        ]
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
