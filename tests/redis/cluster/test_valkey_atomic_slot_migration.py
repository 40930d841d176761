"""Valkey 9's atomic slot migration (``CLUSTER MIGRATESLOTS``; moonish.redis.cluster.atomic)
while a Valkey 9.1.2 cluster is captured: the target's stream carries the slots' snapshot and
the writes forwarded from the source, which the source's own stream carries already, so the
target's link leaves its stream at the first ``CLUSTER SYNCSLOTS`` marker and reads the node
again by a full resync once the migration has ended. The moved keys make no events, a counter
incremented on the source throughout is counted once (applied twice it would end higher than
the cluster's), and a cancelled migration leaves everything as it was."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from moonish.errors import UnavailableError
from moonish.redis.cluster.atomic import ImportWait, is_slot_migration, running_imports
from moonish.redis.replication.messages import ReplicationAuthError
from moonish.redis.topology.nodes import TopologyError
from moonish.slots import hash_slot
from tests.support.redis.capture import events, wait_for
from tests.support.redis.cluster import (
    assert_moved_without_events,
    caught_up_report,
    follow_still_keys,
    mixed_writes,
    node_id,
    writer,
)
from tests.support.servers.cluster import Cluster, redis_cluster
from tests.support.servers.valkey_server import valkey_binary

pytestmark = pytest.mark.redis

MOVED_KEYS = 20_000
FINAL = frozenset({"success", "failed", "cancelled"})


def test_the_markers_and_the_imports_still_running_are_recognised() -> None:
    assert is_slot_migration([b"cluster", b"syncslots", b"ACK"])
    assert is_slot_migration([b"CLUSTER", b"SYNCSLOTS", b"FINISH", b"STATE", b"SUCCESS"])
    assert not is_slot_migration([b"CLUSTER", b"SETSLOT", b"7", b"NODE", b"x"])
    assert not is_slot_migration([b"CLUSTER"])
    job = {"operation": "IMPORT", "slot_ranges": "0-99", "state": "snapshotting"}
    flat = [item.encode() for pair in job.items() for item in pair]  # RESP2: field, value
    done = {**job, "state": "success"}
    export = {**job, "operation": "EXPORT"}
    assert running_imports([flat]) == ["0-99"]
    assert running_imports([{k.encode(): v.encode() for k, v in job.items()}]) == ["0-99"]
    assert running_imports([done, export, {**job, "state": "failed"}]) == []
    assert running_imports([]) == [] and running_imports(b"not a list") == []
    with pytest.raises(TopologyError):
        running_imports([[b"operation", b"IMPORT", b"state"]])


class Answers:
    """Stands in for a node's side connection: answers ``CLUSTER GETSLOTMIGRATIONS`` with
    ``reply``, or raises it."""

    path = "127.0.0.1:7000"

    def __init__(self, reply: object) -> None:
        self.reply = reply

    def command(self, *argv: bytes) -> object:
        assert argv == (b"CLUSTER", b"GETSLOTMIGRATIONS")
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply


def test_a_node_that_refuses_to_say_is_waited_for_and_one_that_is_gone_is_not() -> None:
    wait = ImportWait()
    running = [{"operation": "IMPORT", "slot_ranges": "5-5", "state": "snapshotting"}]
    assert wait.import_running(Answers(running)) and wait.error is None  # type: ignore[arg-type]
    assert not wait.import_running(Answers([]))  # type: ignore[arg-type]
    refused = ReplicationAuthError("Redis refused it", reply="NOPERM no permission", path="n")
    assert wait.import_running(Answers(refused))  # type: ignore[arg-type]
    assert wait.error is not None
    assert wait.error.startswith("CLUSTER GETSLOTMIGRATIONS: Redis refused it")
    gone = UnavailableError("the master closed the connection")
    assert not wait.import_running(Answers(gone))  # type: ignore[arg-type]
    assert wait.import_running(Answers([[b"operation"]]))  # type: ignore[arg-type]
    assert wait.error is not None and "not name/value pairs" in wait.error


def tag_in_slots_of(cluster: Cluster, port: int) -> str:
    """A hash tag whose slot the master at ``port`` serves."""
    with contextlib.closing(cluster.client(port)) as client:
        ranges = [
            (r[0], r[1]) for r in client.execute_command("CLUSTER", "SLOTS") if r[2][1] == port
        ]
    return next(
        f"t{n}"
        for n in range(100_000)
        if any(lo <= hash_slot(f"t{n}".encode()) <= hi for lo, hi in ranges)
    )


def fill(client: RedisCluster, tag: str) -> None:
    """``MOVED_KEYS`` keys ``still:{tag}:<n>`` of 100 bytes, never changed after."""
    pipe = client.pipeline(transaction=False)
    for number in range(MOVED_KEYS):
        pipe.set(f"still:{{{tag}}}:{number}", "x" * 100)
        if number % 2_000 == 1_999:
            pipe.execute()
    pipe.execute()


class Counter:
    """A thread that increments ``count:{tag}`` through a cluster client (which follows the
    slot to its new node) until stopped."""

    def __init__(self, cluster: Cluster, tag: str) -> None:
        self.key = f"count:{{{tag}}}"
        self.client = writer(cluster)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(redis.RedisError):
                self.client.incr(self.key)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()
        self.client.close()


def migrations(cluster: Cluster, port: int) -> list[dict[str, Any]]:
    with contextlib.closing(cluster.client(port)) as client:
        return list(client.execute_command("CLUSTER", "GETSLOTMIGRATIONS"))


def migrate(cluster: Cluster, source: int, target: int, tag: str, cancel: bool) -> str:
    """Migrate ``tag``'s slot from ``source`` to ``target`` (cancelled at once with
    ``cancel``): the job's final state on the source."""
    slot = hash_slot(tag.encode())
    with contextlib.closing(cluster.client(source)) as client:
        client.execute_command(
            "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", slot, slot, "NODE", node_id(cluster, target)
        )
        if cancel:
            client.execute_command("CLUSTER", "CANCELSLOTMIGRATIONS")
    wait_for(
        lambda: all(job["state"] in FINAL for job in migrations(cluster, source)),
        "the migration to end",
        60,
    )
    (job,) = migrations(cluster, source)
    return str(job["state"])


@pytest.mark.parametrize("cancel", [False, True], ids=["completed", "cancelled"])
def test_an_atomic_slot_migration_moves_keys_without_events(tmp_path: Path, cancel: bool) -> None:
    data = tmp_path / "data"
    with redis_cluster(tmp_path / "cluster", binary=valkey_binary()) as cluster:
        source, target = cluster.master_ports()[:2]
        tag = tag_in_slots_of(cluster, source)
        client = writer(cluster)
        fill(client, tag)
        following, start = follow_still_keys(cluster, data, 200)
        counter = Counter(cluster, tag)
        time.sleep(0.2)
        state = migrate(cluster, source, target, tag, cancel)
        time.sleep(0.5)  # more increments, on the target after a completed migration
        counter.finish()
        mixed_writes(client, 0, 100)
        client.close()
        caught_up_report(following, cluster)
        report = following.finish()
        assert state == ("cancelled" if cancel else "success")
        assert_moved_without_events(cluster, data, start)
        counts = [
            int(envelope["after"]["value"])
            for envelope in events(data, start)
            if envelope["after"] is not None and envelope["after"]["key"] == counter.key
        ]
        assert counts and counts == sorted(set(counts))  # never twice, never back
    # A migration cancelled at once may end before the target streamed anything of it (no
    # marker: nothing to leave); one the target streamed is left and read again.
    imports = (report.migrations or {}).get("atomic_imports", 0)
    assert imports == 1 or (cancel and imports == 0)
    (moved,) = [link for link in report.links or [] if link["address"] == f"127.0.0.1:{target}"]
    assert moved["full_resyncs"] == 1 + imports  # the first sync, and one after a migration
