"""A cluster capture against a real Redis Cluster (tests/support/servers/cluster.py): writes of
every family, the cluster's keyspace to compare with moonish's, and the capture in a thread."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import redis
from redis.cluster import ClusterNode as ClientNode
from redis.cluster import RedisCluster

from moonish.redis.capture.status import CaptureReport
from moonish.redis.cluster.runner import capture_cluster
from tests.support.redis.capture import Following, events, redis_state
from tests.support.servers.cluster import Cluster


def writer(cluster: Cluster) -> RedisCluster:
    """A cluster client that knows every running node (it follows MOVED and failovers)."""
    return RedisCluster(startup_nodes=[ClientNode("127.0.0.1", p) for p in cluster.alive()])


def cluster_state(cluster: Cluster) -> dict[Any, Any]:
    """Every master's keys, as :func:`our_state` gives moonish's."""
    state: dict[Any, Any] = {}
    for port in cluster.master_ports():
        with contextlib.closing(redis.Redis(host="127.0.0.1", port=port)) as client:
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


def follow(cluster: Cluster, data: Path, port: int | None = None) -> Following:
    """:func:`capture_cluster` of the cluster (its node at ``port``, else the first) into 4
    shards."""
    return Following(cluster.url(port), data, 4, capture_cluster)


def caught_up_report(following: Following, cluster: Cluster) -> None:
    """Until every link is 0 bytes behind its node (asked once a status interval: first wait
    for a fresh answer)."""
    time.sleep(0.3)

    def caught_up(report: CaptureReport) -> bool:
        links = report.links or []
        return len(links) == 3 and all(link["bytes_behind"] == 0 for link in links)

    following.until(caught_up, "every link to catch up")
