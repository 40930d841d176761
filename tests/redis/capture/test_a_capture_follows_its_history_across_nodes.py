"""A data directory's source is its replication history, not an address (moonish.redis.capture
.source), against real redis-servers on 127.0.0.1: a promoted replica continues it by PSYNC
(no full resync); a node with another history is refused, or taken with accept_new_source as a
full resync written as the differences; a capture through Sentinel follows a failover Sentinel
performs (continuing by PSYNC, or with only the real changes when the promoted node's
history ends before the old master's last bytes) and never becomes the promoted replica."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis

from moonish.redis.capture.runner import capture
from moonish.redis.routing.sources import SourceMismatchError, load_source
from tests.support.cli import run
from tests.support.redis.capture import (
    FAST,
    Following,
    events,
    last_lsns,
    master_offset,
    our_state,
    redis_state,
    url_of,
    wait_for,
)
from tests.support.servers.redis_server import redis_server
from tests.support.servers.sentinel import master_port, sentinel_url, sentinels

pytestmark = pytest.mark.redis


def replica_of(client: redis.Redis) -> tuple[str, str]:
    return "--replicaof", f"127.0.0.1 {client.connection_pool.connection_kwargs['port']}"


def synced(replica: redis.Redis, master: redis.Redis) -> None:
    wait_for(
        lambda: (
            replica.info("replication").get("master_link_status") == "up"
            and int(replica.info("replication")["slave_repl_offset"]) >= master_offset(master)
        ),
        "the replica to catch up",
    )


def test_a_promoted_replica_continues_the_data_directory(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "r").mkdir()
    data = tmp_path / "data"
    with (
        redis_server(tmp_path / "m") as master,
        redis_server(
            tmp_path / "r",
            "--replicaof",
            f"127.0.0.1 {master.connection_pool.connection_kwargs['port']}",
        ) as replica,
    ):
        if True:
            following = Following(url_of(master), data)
            for i in range(50):
                master.set(f"k:{i}", i)
            following.caught_up(master)
            first = following.finish()
            assert first.full_resyncs == 1
            synced(replica, master)
            replica.execute_command("REPLICAOF", "NO", "ONE")  # promoted; the master goes on
            for i in range(50, 80):
                replica.set(f"k:{i}", i)
            replica.delete("k:0")
            again = Following(url_of(replica), data)
            again.caught_up(replica)
            report = again.finish()
            assert report.full_resyncs == 0 and report.continues == 1
            (source,) = [event for event in again.events if event.kind == "source"]
            assert "continues this data directory's history" in source.text
            assert our_state(data) == redis_state(replica, (0,))
            assert load_source(str(data))["location"].endswith(
                str(replica.connection_pool.connection_kwargs["port"])
            )


def test_a_node_with_another_history_is_refused_unless_accepted(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    data = tmp_path / "data"
    with redis_server(tmp_path / "a") as first, redis_server(tmp_path / "b") as other:
        first.mset({"shared": "a", "only-a": "1"})
        following = Following(url_of(first), data)
        following.caught_up(first)
        following.finish()
        other.mset({"shared": "b", "only-b": "2"})
        with pytest.raises(SourceMismatchError, match="another data set"):
            capture(url_of(other), data, 2, stop=threading.Event(), options=FAST)
        out = run("wal", "capture", url_of(other), str(data), "--shards", "2")
        assert out.returncode == 2 and b"--accept-new-source" in out.stderr
        taken = Following(url_of(other), data, accept_new_source=True)
        taken.caught_up(other)
        report = taken.finish()
        assert report.full_resyncs == 1
        resync = report.last_full_resync
        assert resync is not None and (resync.created, resync.updated, resync.deleted) == (1, 1, 1)
        assert our_state(data) == redis_state(other, (0,))


def test_a_capture_through_sentinel_follows_its_failover(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "r").mkdir()
    (tmp_path / "s").mkdir()
    data = tmp_path / "data"
    with (
        redis_server(tmp_path / "m") as master,
        redis_server(tmp_path / "r", *replica_of(master)) as replica,
    ):
        old_port = master.connection_pool.connection_kwargs["port"]
        new_port = replica.connection_pool.connection_kwargs["port"]
        with sentinels(tmp_path / "s", old_port) as watching:
            wait_for(
                lambda: any(
                    entry["port"] == new_port and "s_down" not in entry["flags"]
                    for entry in watching[0].sentinel_slaves("mymaster")
                ),
                "the sentinels to see the replica",
                30,
            )
            following = Following(sentinel_url(watching), data)
            for i in range(40):
                master.set(f"k:{i}", i)
            following.caught_up(master)
            synced(replica, master)
            before_failover = last_lsns(data)
            watching[0].execute_command("SENTINEL", "FAILOVER", "mymaster")
            wait_for(lambda: master_port(watching[0]) == new_port, "the failover", 60)
            wait_for(lambda: replica.info("replication")["role"] == "master", "the promotion", 30)
            for i in range(40, 70):
                replica.set(f"k:{i}", i)
            following.caught_up(replica)
            report = following.finish()
            # The old master published Sentinel's hellos to its replicas after the replica's
            # promotion point: PSYNC may answer +FULLRESYNC then, applied as the differences.
            after = [
                (event["op"], event["after"]["key"]) for event in events(data, before_failover)
            ]
            assert sorted(after) == sorted(("c", f"k:{i}") for i in range(40, 70))
            assert report.continues + report.full_resyncs - 1 >= 1
            sources = [event for event in following.events if event.kind == "source"]
            assert sources and str(new_port) in sources[-1].fields["node"]
            assert our_state(data) == redis_state(replica, (0,))
            assert master_port(watching[1]) == new_port  # the real replica, never moonish
