"""Live capture (moonish.redis.capture.runner, ``moonish wal capture``) against a real redis-server
7.0 that each test starts on 127.0.0.1: the keyspace followed live equals Redis's, MULTI/EXEC
stays atomic, a capture killed and restarted applies every command once, a backlog overrun
resynchronises as a diff, the ACKed offset shows in INFO replication and WAIT returns."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner

import moonish
from cli.cdc.info import info
from moonish.redis.aof.importer import import_aof
from moonish.redis.capture.runner import capture
from moonish.redis.capture.status import CaptureOptions, read_status
from moonish.redis.routing.sources import SourceMismatchError, decode_position
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.snapshot import list_snapshots
from tests.support.paths import ROOT
from tests.support.redis.capture import (
    FAST,
    Running,
    client_of,
    events,
    every_type,
    last_lsns,
    master_offset,
    our_state,
    redis_state,
    url_of,
    wait_for,
)
from tests.support.servers.redis_server import redis_server, shard_writer


@pytest.mark.redis
def test_live_capture_of_every_type_equals_redis(tmp_path: Path, workdir: Path) -> None:
    with redis_server(workdir) as client:
        rng = random.Random(7)
        every_type(client, rng, 300, "1", live=False)  # before: the full resync's r rows
        with Running(client, tmp_path / "data", 3) as running:
            running.caught_up(client)
            every_type(client, rng, 1500, "2", live=True)  # live
            with client.pipeline(transaction=True) as pipe:
                pipe.set("{t}a", 1).set("{t}b", 2).incr("{t}n").delete("{k1}:s")
                pipe.execute()
            running.caught_up(client)
            final = master_offset(client)  # the ACKed offset (sent every second)
            wait_for(lambda: client.info("replication")["slave0"]["offset"] == final, "the ACK")
            assert client.execute_command("WAIT", 1, 5000) == 1
            expected = redis_state(client)
            report = running.finish()
    assert our_state(tmp_path / "data") == expected
    assert report.full_resyncs == 1 and report.reconnects == 0
    assert report.rdb_keys > 0 and report.transactions > 0
    seen = events(tmp_path / "data")
    rows = [e for e in seen if e["op"] == "r"]
    assert len(rows) == report.rdb_keys
    block = [e for e in seen if e["after"] and e["after"]["key"] in ("{t}a", "{t}b", "{t}n")]
    assert [e["transaction"]["total_order"] for e in block] == [1, 2, 3]  # one atomic batch
    assert len({e["transaction"]["id"] for e in block}) == 1
    expired = [e for e in seen if e["before"] and e["before"]["key"] == "short-lived"]
    assert [e["op"] for e in expired] == ["d"]  # the master's DEL, not moonish's own expiry
    status = read_status(str(tmp_path / "data"))
    assert status is not None and status["running"] is False
    shown = CliRunner().invoke(info, [str(tmp_path / "data")])
    assert shown.exit_code == 0 and orjson.loads(shown.output)["capture"] == status
    assert status["durable_offset"] == report.durable_offset == report.received_offset
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        with shard_writer(Path(shard_dir)) as writer:
            position = decode_position(writer.source)
            assert position["offset"] == report.durable_offset  # every shard marked at stop


CLI = [sys.executable, "-m", "cli.main", "wal", "capture"]


def start_cli(url: str, data_dir: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [*CLI, url, str(data_dir), "--shards", "2", "--sync-interval-ms", "10", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def status(data_dir: Path) -> dict[str, Any]:
    return read_status(str(data_dir)) or {}


def streaming(data_dir: Path) -> None:
    """Wait until a capture just started has a running status whose durable offset moves
    (it is past its full resync or PSYNC, following the stream)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(data_dir / "capture.json")
    wait_for(lambda: status(data_dir).get("running") is True, "a running capture", 60)
    first = status(data_dir)["durable_offset"]
    wait_for(lambda: status(data_dir)["durable_offset"] > first, "the capture to move")


def incr_chains(data_dir: Path) -> dict[str, list[int]]:
    chains: dict[str, list[int]] = {}
    for event in events(data_dir):
        if event["op"] in ("r", "c", "u") and event["after"]["key"].startswith("counter"):
            chains.setdefault(event["after"]["key"], []).append(int(event["after"]["value"]))
    return chains


@pytest.fixture
def writing() -> Iterator[Callable[[redis.Redis], threading.Event]]:
    """Starts INCRs of 20 counters in a thread until the returned Event is set, and every
    tenth time an LMOVE between two lists of different shards (``lsrc`` and ``ldst``, shards
    0 and 1 of 2: a command across shards, of two workers with ``--processes 2``)."""
    stops: list[threading.Event] = []
    threads = []

    def start(client: redis.Redis) -> threading.Event:
        stop = threading.Event()
        own = client_of(client)

        def run() -> None:
            i = 0
            while not stop.is_set():
                own.incr(f"counter{i % 20}")
                if i % 10 == 0:
                    own.rpush("lsrc", i)
                    own.lmove("lsrc", "ldst", "LEFT", "RIGHT")
                i += 1
                stop.wait(0.0005)  # about 2,000 a second: the capture keeps up
            own.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        stops.append(stop)
        threads.append(thread)
        return stop

    yield start
    for stop in stops:
        stop.set()
    for thread in threads:
        thread.join(10)


SNAPSHOTS = ("--snapshot-every-records", "200", "--processes", "2")


@pytest.mark.redis
@pytest.mark.parametrize(
    "extra", [(), ("--processes", "2"), SNAPSHOTS], ids=["one", "processes", "snapshots"]
)
def test_a_capture_killed_and_restarted_applies_every_command_once(
    tmp_path: Path,
    workdir: Path,
    writing: Callable[[redis.Redis], threading.Event],
    extra: tuple[str, ...],
) -> None:
    data_dir = tmp_path / "data"
    with redis_server(workdir, "--repl-backlog-size", "64mb") as client:
        url = url_of(client)
        writer_stop = writing(client)
        rng = random.Random(5)
        for _ in range(3):  # SIGKILLed mid-stream, three times, then a SIGTERM
            process = start_cli(url, data_dir, *extra)
            streaming(data_dir)
            time.sleep(rng.uniform(0.05, 0.5))
            process.send_signal(signal.SIGKILL)
            process.communicate(timeout=10)
        process = start_cli(url, data_dir, *extra)
        streaming(data_dir)
        writer_stop.set()
        time.sleep(0.1)
        final = master_offset(client)
        wait_for(lambda: status(data_dir).get("durable_offset", 0) >= final, "the capture")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
        assert process.returncode == 0, err.decode()
        summary = orjson.loads(out)
        assert summary["continues"] == 1 and summary["full_resyncs"] == 0, (summary, err)
        expected = redis_state(client, (0,))
    if extra == SNAPSHOTS:  # taken on their own, some while the capture was killed
        for shard in ("shard-0", "shard-1"):
            assert list_snapshots(str(data_dir / shard)), shard
    assert our_state(data_dir) == expected
    chains = incr_chains(data_dir)
    assert len(chains) == 20
    for key, values in chains.items():  # the RDB's value, then every INCR once: no gap or repeat
        assert values == list(range(values[0], values[0] + len(values))), key
        assert expected[(0, key.encode())][1] == str(values[-1]).encode()


@pytest.mark.redis
@pytest.mark.parametrize("processes", [1, 2])
def test_a_backlog_overrun_resyncs_as_a_diff(tmp_path: Path, workdir: Path, processes: int) -> None:
    data_dir = tmp_path / "data"
    with redis_server(workdir, "--repl-backlog-size", "16kb") as client:
        for i in range(200):
            client.set(f"key{i}", i)
        client.rpush("list", *range(50))
        with Running(client, data_dir, 2, processes) as running:
            running.caught_up(client)
            client.set("key0", "changed")
            running.caught_up(client)
            running.finish()
        before = last_lsns(data_dir)
        client.set("filler", "x" * 100_000)  # more than the backlog holds
        client.delete("filler", "key1", "key2")
        client.set("key3", "new value")
        client.set("key4", "4")  # written, but the same value: no record
        client.lpush("list", "head")
        client.set("brand-new", "v")
        with Running(client, data_dir, 2, processes) as running:
            running.caught_up(client)
            expected = redis_state(client, (0,))
            report = running.finish()
    assert report.full_resyncs == 1 and report.continues == 0
    assert report.removed_keys == 2
    resync = report.last_full_resync
    assert resync is not None and resync.rdb_bytes > 0
    assert (resync.rows, resync.created, resync.updated, resync.deleted) == (0, 1, 2, 2)
    (logged,) = [event for event in running.events if event.kind == "full_resync"]
    assert "as differences" in logged.text and "c 1, u 2, d 2" in logged.text
    assert our_state(data_dir) == expected
    changes = events(data_dir, before)
    summary = sorted((e["op"], (e["after"] or e["before"])["key"]) for e in changes)
    assert summary == [
        ("c", "brand-new"),
        ("d", "key1"),
        ("d", "key2"),
        ("u", "key3"),
        ("u", "list"),
    ]


@pytest.mark.redis
def test_a_restart_continues_in_the_db_the_stream_had_selected(
    tmp_path: Path, workdir: Path
) -> None:
    data_dir = tmp_path / "data"
    with redis_server(workdir) as client:
        client.set("a", 1)
        with Running(client, data_dir, 2) as running:
            running.caught_up(client)
            running.finish()
        count = len(events(data_dir))
        client.incr("a")
        in_db_1 = client_of(client, 1)
        in_db_1.set("b", "in db 1")  # the stream's SELECT 1 ...
        with Running(client, data_dir, 2) as running:
            running.caught_up(client)
            running.finish()
        in_db_1.set("c", "still db 1")  # ... and after a restart no SELECT comes again
        with Running(client, data_dir, 2) as running:
            running.caught_up(client)
            report = running.finish()
        expected = redis_state(client)
    assert report.continues == 1 and report.full_resyncs == 0
    assert our_state(data_dir) == expected
    assert (1, b"c") in expected and len(events(data_dir)) == count + 3


@pytest.mark.redis
def test_another_source_is_refused(tmp_path: Path, workdir: Path) -> None:
    aof = workdir / "aof"
    with redis_server(aof.parent, "--appendonly", "yes") as client:
        client.set("a", 1)
        client.execute_command("BGREWRITEAOF")
        time.sleep(0.5)
        import_aof(workdir / "appendonlydir", tmp_path / "data", 1)
        with pytest.raises(SourceMismatchError, match="follows the AOF"):
            capture(url_of(client), tmp_path / "data", 1, options=FAST)


def test_an_unreachable_master_gives_up_after_max_reconnects(tmp_path: Path) -> None:
    from moonish.errors import UnavailableError

    options = CaptureOptions(backoff_min_ms=1, backoff_max_ms=2, max_reconnects=2)
    with pytest.raises(UnavailableError, match="cannot connect"):
        capture("redis://127.0.0.1:1", tmp_path / "data", 2, options=options)
    assert not (tmp_path / "data").exists()  # nothing written: nothing left behind


@pytest.mark.redis
@pytest.mark.parametrize("processes", [1, 2])
def test_a_dropped_connection_reconnects_and_continues(
    tmp_path: Path, workdir: Path, processes: int
) -> None:
    data_dir = tmp_path / "data"
    with redis_server(workdir) as client, Running(client, data_dir, 2, processes) as running:
        running.caught_up(client)
        for round_ in range(3):
            for i in range(200):
                client.incr(f"n{i % 7}")
            client.execute_command("CLIENT", "KILL", "TYPE", "replica")
            client.rpush("after-kill", round_)
            running.caught_up(client)  # reconnected
        running.caught_up(client)
        expected = redis_state(client, (0,))
        report = running.finish()
    assert report.reconnects == 3 and report.continues == 3 and report.full_resyncs == 1
    assert our_state(data_dir) == expected
    pushes = [e for e in events(data_dir) if e["after"] and e["after"]["key"] == "after-kill"]
    assert len(pushes) == 3  # each command once, across the reconnects


@pytest.mark.redis
def test_a_stop_while_the_shards_rebuild_returns_before_connecting(
    tmp_path: Path, workdir: Path
) -> None:
    """SIGTERM/Ctrl-C set ``stop``: during the rebuild of a long log the capture returns at
    the next batch of records, having connected to no one and written nothing. (The first
    capture takes no snapshot as it closes, so the restart replays its whole log.)"""
    data_dir = tmp_path / "data"
    no_close_snapshot = dataclasses.replace(FAST, snapshots=SnapshotPolicy(on_close_records=0))
    with redis_server(workdir) as client:
        with Running(client, data_dir, 2, options=no_close_snapshot) as running:
            running.caught_up(client)
            with client.pipeline(transaction=False) as pipe:
                for i in range(30_000):
                    pipe.incr(f"n{i % 50}")
                pipe.execute()
            running.caught_up(client)
            running.finish()
        ends = {}
        for shard_dir in moonish.shard_dirs(data_dir):
            with shard_writer(Path(shard_dir)) as writer:
                ends[shard_dir] = writer.next_lsn
        stop = threading.Event()
        calls: list[tuple[str, int, int]] = []

        def recovering(shard_dir: str, lsn: int, last_lsn: int) -> None:
            calls.append((shard_dir, lsn, last_lsn))
            if lsn > 0:
                stop.set()  # as the signal handler does, mid-rebuild

        replicas = client.info("replication")["connected_slaves"]
        report = capture(url_of(client), data_dir, 2, stop=stop, on_recovery=recovering)
        assert client.info("replication")["connected_slaves"] == replicas
    assert report.continues == report.full_resyncs == report.commands == 0
    assert len(calls) == 2 and calls[-1][1] < calls[-1][2]  # stopped before the log's end
    for shard_dir, end in ends.items():
        with shard_writer(Path(shard_dir)) as writer:
            assert writer.next_lsn == end  # nothing written


@pytest.mark.redis
@pytest.mark.parametrize("processes", [1, 2])
def test_a_stop_before_the_workers_are_ready_connects_to_no_one(
    tmp_path: Path, workdir: Path, processes: int
) -> None:
    """With worker processes the keyspaces are rebuilt by the workers alone (the capture's
    own process only checks the shards); a stop requested meanwhile kills them and returns."""
    data_dir = tmp_path / "data"
    with redis_server(workdir) as client:
        with Running(client, data_dir, 2, processes=processes) as running:
            running.caught_up(client)
            client.mset({f"k{i}": i for i in range(1000)})
            running.caught_up(client)
            running.finish()
        expected = redis_state(client, (0,))
        stop = threading.Event()
        stop.set()
        rebuilt: list[str] = []
        report = capture(
            url_of(client),
            data_dir,
            2,
            stop=stop,
            processes=processes,
            on_recovery=lambda shard_dir, *_: rebuilt.append(shard_dir),
        )
        assert int(client.info("replication")["connected_slaves"]) == 0
    assert report.continues == report.full_resyncs == report.commands == 0
    assert rebuilt == []  # the stop is seen before any shard's rebuild goes on
    assert our_state(data_dir) == expected  # nothing lost or written by the stopped start
