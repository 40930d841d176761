"""A cluster capture against a real Redis Cluster (tests/support/servers/cluster.py): writes of
every family, the cluster's keyspace to compare with moonish's, and the capture in a thread."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
from redis.cluster import ClusterNode as ClientNode
from redis.cluster import RedisCluster

import moonish
from moonish.redis.capture.status import CaptureReport
from moonish.redis.cluster.runner import capture_cluster
from moonish.redis.replication.messages import ReplicaOptions
from moonish.redis.topology.nodes import REPLICA
from moonish.redis.topology.probe import ClusterProbe
from tests.support.cli import MOONISH, run
from tests.support.paths import ROOT
from tests.support.redis.capture import (
    Following,
    events,
    last_lsns,
    our_state,
    redis_state,
    wait_for,
)
from tests.support.servers.cluster import Cluster


def writer(cluster: Cluster) -> RedisCluster:
    """A cluster client that knows every running node (it follows MOVED and failovers)."""
    nodes = [ClientNode("127.0.0.1", port) for port in cluster.alive()]
    return RedisCluster(startup_nodes=nodes, **cluster.ssl())


def cluster_state(cluster: Cluster) -> dict[Any, Any]:
    """Every master's keys, as :func:`our_state` gives moonish's."""
    state: dict[Any, Any] = {}
    for port in cluster.master_ports():
        with contextlib.closing(cluster.client(port, decode=False)) as client:
            state.update(redis_state(client, dbs=(0,)))
    return state


def mixed_writes(client: RedisCluster, start: int, count: int) -> None:
    """Writes of every family over all slots, and counters whose every value is one event."""
    for number in range(start, start + count):
        client.incr(f"counter:{number % 50}")
        client.set(f"string:{number}", number)
        client.hset(f"hash:{number % 20}", f"field{number}", number)
        client.rpush(f"list:{number % 10}", number)
        client.sadd(f"set:{number % 10}", number)
        client.zadd(f"zset:{number % 10}", {f"m{number}": number})
        if number % 7 == 0:
            client.delete(f"string:{number - 3}")
        if number % 11 == 0:
            client.set(f"ttl:{number}", "x", ex=3600)


def assert_each_counter_value_once(data: Path) -> None:
    """Every INCR of a counter is exactly one event: its values go 1, 2, 3... once each."""
    seen: dict[str, list[int]] = defaultdict(list)
    for envelope in events(data):
        after = envelope["after"]
        if after and after["key"].startswith("counter:") and envelope["op"] != "r":
            seen[after["key"]].append(int(after["value"]))
    assert seen
    for key, values in seen.items():
        assert values == list(range(values[0], values[0] + len(values))), key


def follow(cluster: Cluster, data: Path, port: int | None = None, **kwargs: Any) -> Following:
    """:func:`capture_cluster` of the cluster (its node at ``port``, else the first) into 4
    shards, with ``kwargs`` (``prefer_replica=True``)."""
    return Following(cluster.url(port), data, 4, capture_cluster, **kwargs)


def follow_still_keys(
    cluster: Cluster, data: Path, count: int = 2000
) -> tuple[Following, dict[str, int]]:
    """Write ``count`` keys ``still:<n>`` (never changed after), start a capture into ``data``
    and wait until it caught up: the capture and each shard's last LSN then."""
    client = writer(cluster)
    for number in range(count):
        client.set(f"still:{number}", number)
    client.close()
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    return following, last_lsns(data)


def assert_captured(cluster: Cluster, data: Path) -> None:
    """The capture (finished) equals the cluster, every counter value there once."""
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    assert_each_counter_value_once(data)


def assert_moved_without_events(cluster: Cluster, data: Path, start: dict[str, int]) -> None:
    """:func:`assert_captured`, and no ``still:`` key has an event after ``start``
    (:func:`follow_still_keys`)."""
    assert_captured(cluster, data)
    touched = written_keys(events(data, start))
    assert not {key for key in touched if key.startswith("still:")}


def replicas_online(cluster: Cluster, options: ReplicaOptions | None = None) -> bool:
    """Whether the seed's ``CLUSTER SHARDS`` shows every replica ``online`` (a replica whose
    offset gossip has not reached the seed yet shows ``loading``, and is not read by
    ``prefer_replica``)."""
    with ClusterProbe(cluster.url(), options) as probe:
        replicas = [node for node in probe.topology().nodes if node.role == REPLICA]
    return len(replicas) == cluster.masters and all(node.usable for node in replicas)


def written_with_replicas(cluster: Cluster, count: int) -> RedisCluster:
    """A client that has made ``count`` mixed writes, once the seed shows every replica
    online (so ``prefer_replica`` reads them); the caller closes it."""
    client = writer(cluster)
    mixed_writes(client, 0, count)
    wait_for(lambda: replicas_online(cluster), "the seed to see every replica online")
    return client


def cli_capture_info(*args: str) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """Run ``moonish wal capture <args>`` (``args[1]``: the data directory) until it wrote
    ``capture.json`` and 1.5 s more, what ``moonish cdc info`` printed then (JSON), and the
    summary and stderr the capture printed when SIGTERM stopped it (exit 0 asserted)."""
    data = Path(args[1])
    process = subprocess.Popen(
        [*MOONISH, "wal", "capture", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: (data / "capture.json").exists(), "capture.json", 60)
        time.sleep(1.5)
        info = json.loads(run("cdc", "info", str(data)).stdout)
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr.decode()
    return info, json.loads(stdout), stderr


def master_offsets(cluster: Cluster) -> dict[str, int]:
    """Each master's (that serves slots) ``master_repl_offset`` now, by ``host:port``."""
    offsets = {}
    for port in cluster.master_ports():
        with contextlib.closing(cluster.client(port)) as client:
            offsets[f"127.0.0.1:{port}"] = int(client.info("replication")["master_repl_offset"])
    return offsets


def caught_up_report(following: Following, cluster: Cluster) -> None:
    """Until every master's link has made durable what the master had written when this was
    called (writes stopped before)."""
    offsets = master_offsets(cluster)

    def caught_up(report: CaptureReport) -> bool:
        durable = {
            str(link["address"]): int(link["durable_offset"])  # type: ignore[call-overload]
            for link in report.links or []
            if link["state"] == "connected"
        }
        return all(durable.get(address, -1) >= offset for address, offset in offsets.items())

    following.until(caught_up, "every link to catch up")


def node_id(cluster: Cluster, port: int) -> str:
    with contextlib.closing(cluster.client(port)) as client:
        return str(client.execute_command("CLUSTER", "MYID"))


def reshard(cluster: Cluster, source: int, target: int, slots: int) -> None:
    """``redis-cli --cluster reshard`` of ``slots`` slots from ``source`` to ``target``."""
    cli = shutil.which("redis-cli")
    assert cli
    ids = ("--cluster-from", node_id(cluster, source), "--cluster-to", node_id(cluster, target))
    count = ("--cluster-slots", str(slots), "--cluster-yes")
    subprocess.run(
        [cli, *cluster.cli_tls(), "--cluster", "reshard", f"127.0.0.1:{source}", *ids, *count],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        timeout=120,
    )


def written_keys(after: list[dict[str, object]]) -> set[str]:
    return {
        str((envelope["after"] or envelope["before"])["key"])  # type: ignore[index]
        for envelope in after
        if envelope["op"] in ("c", "u", "d")
    }


def assert_same_keyspace(ours: dict[Any, Any], theirs: dict[Any, Any]) -> None:
    """moonish's keyspace equals the cluster's: the same keys, types and values, expiry
    times within a second (a migrated key's expiry moves by the milliseconds the migration
    took, which moonish does not write as a change: moonish.redis.cluster.handoff)."""
    assert set(ours) == set(theirs), sorted(set(ours) ^ set(theirs))[:10]
    for key, mine in ours.items():
        other = theirs[key]
        assert mine[:2] == other[:2], (key, mine, other)
        if mine[2] is None or other[2] is None:
            assert mine[2] == other[2], (key, mine, other)
        else:
            assert abs(mine[2] - other[2]) <= 1000, (key, mine, other)


def under_writes(cluster: Cluster, start: int, action: object) -> None:
    """Run ``action()`` while a thread writes (mixed_writes from ``start`` on)."""
    assert callable(action)
    stop = threading.Event()
    written = [start]

    def load() -> None:
        client = writer(cluster)
        while not stop.is_set():
            mixed_writes(client, written[0], 10)
            written[0] += 10
        client.close()

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        action()
    finally:
        stop.set()
        loader.join(30)


def in_sync(cluster: Cluster, master: int, replica: int) -> bool:
    """Whether ``replica`` holds every write ``master`` has made."""
    with (
        contextlib.closing(cluster.client(master)) as first,
        contextlib.closing(cluster.client(replica)) as second,
    ):
        offset = int(first.info("replication")["master_repl_offset"])
        return int(second.info("replication")["slave_repl_offset"]) >= offset


def kill_first_master(cluster: Cluster) -> int:
    """SIGKILL the first master once its replica holds every write, and wait until the
    replica is promoted; the replica's port."""
    victim = cluster.master_ports()[0]
    heir = cluster.replica_of(victim)
    wait_for(lambda: in_sync(cluster, victim, heir), "the replica to hold every write")
    cluster.processes[victim].kill()
    cluster.processes[victim].wait()
    cluster.wait_for_master(heir)
    return heir


def snapshot_marks(data_dir: Path) -> list[str]:
    """``source.snapshot`` of every ``r`` envelope of a merged read of ``data_dir``, in its
    order (a first start's loads over the links read as one snapshot: ``"first"`` first,
    ``"last"`` last, once each)."""
    merged = moonish.read(str(data_dir), "earliest", limit=10_000)
    return [
        envelope["source"]["snapshot"]
        for envelope in (orjson.loads(event.envelope) for event in merged.events)
        if envelope["op"] == "r"
    ]
