"""Nodes added to and removed from a cluster while its capture runs (moonish.redis.cluster
.session, .watch), against a real cluster on 127.0.0.1: a master added and given slots by a
reshard gets a link without a restart; a master whose slots all moved away and that is then
stopped is retired; neither makes an event for a key that only moved, and the data directory
equals the cluster with every command applied once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.redis.capture import events, last_lsns, our_state, wait_for
from tests.support.redis.cluster import (
    assert_each_counter_value_once,
    assert_same_keyspace,
    caught_up_report,
    cluster_state,
    follow,
    mixed_writes,
    reshard,
    writer,
    written_keys,
)
from tests.support.servers.cluster import Cluster

pytestmark = pytest.mark.redis


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


def test_a_master_added_and_given_slots_gets_a_link(cluster: Cluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    client = writer(cluster)
    for number in range(2000):
        client.set(f"still:{number}", number)
    client.close()
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    start = last_lsns(data)
    added = cluster.add_master()

    def linked(report: object) -> bool:
        links = getattr(report, "links", None) or []
        return any(
            link["address"] == f"127.0.0.1:{added}" and link["state"] == "connected"
            for link in links
        )

    following.until(linked, "a link to the added master, before it has slots")
    first = cluster.master_ports()[0]
    under_writes(cluster, 0, lambda: reshard(cluster, first, added, 500))
    client = writer(cluster)
    mixed_writes(client, 10_000, 100)  # the new node's slots among them
    client.close()

    caught_up_report(following, cluster)  # the added master's link among them
    report = following.finish()
    assert report.links is not None
    (new,) = [link for link in report.links if link["address"] == f"127.0.0.1:{added}"]
    assert new["slots"] and new["full_resyncs"] == 1
    assert any(e.kind == "source" and str(added) in e.text for e in following.events)
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    touched = written_keys(events(data, start))
    assert not {key for key in touched if key.startswith("still:")}
    assert_each_counter_value_once(data)


def test_a_master_emptied_and_stopped_is_retired(cluster: Cluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    client = writer(cluster)
    for number in range(2000):
        client.set(f"still:{number}", number)
    client.close()
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    start = last_lsns(data)
    leaving, staying = cluster.master_ports()[:2]
    its_replica = cluster.replica_of(leaving)  # (it may move to another master once emptied)
    under_writes(cluster, 0, lambda: reshard(cluster, leaving, staying, 5461))

    def gone(link: dict[str, object]) -> bool:
        return link["state"] == "retired" or not link["slots"]

    wait_for(
        lambda: all(
            gone(link)
            for link in (following.report.links or [])  # type: ignore[union-attr]
            if link["address"] == f"127.0.0.1:{leaving}"
        ),
        "the emptied master's link to serve no slot (Redis 7 turns it into a replica)",
    )
    # an emptied master drops its replicas (moonish too); both stop now
    for port in [leaving, its_replica]:
        cluster.processes[port].terminate()
        cluster.processes[port].wait(10)
    client = writer(cluster)
    mixed_writes(client, 10_000, 100)
    client.close()

    def retired(report: object) -> bool:
        links = getattr(report, "links", None) or []
        gone = [link for link in links if link["address"] == f"127.0.0.1:{leaving}"]
        return len(gone) == 1 and gone[0]["state"] == "retired"

    following.until(retired, "the emptied master's link to retire")
    caught_up_report(following, cluster)
    following.finish()
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    touched = written_keys(events(data, start))
    assert not {key for key in touched if key.startswith("still:")}
    assert_each_counter_value_once(data)
