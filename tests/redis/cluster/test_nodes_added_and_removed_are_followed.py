"""Nodes added to and removed from a cluster while its capture runs (moonish.redis.cluster
.session, .watch), against a real cluster on 127.0.0.1: a master added and given slots by a
reshard gets a link without a restart; a master whose slots all moved away and that is then
stopped is retired, and one retired while still a master is followed again once it gets slots
back; none makes an event for a key that only moved, and the data directory
equals the cluster with every command applied once."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from tests.support.redis.capture import wait_for
from tests.support.redis.cluster import (
    assert_moved_without_events,
    caught_up_report,
    follow_still_keys,
    mixed_writes,
    reshard,
    under_writes,
    writer,
)
from tests.support.servers.cluster import Cluster

pytestmark = pytest.mark.redis


def test_a_master_added_and_given_slots_gets_a_link(cluster: Cluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    following, start = follow_still_keys(cluster, data)
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
    assert_moved_without_events(cluster, data, start)


def test_a_master_emptied_and_stopped_is_retired(cluster: Cluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    following, start = follow_still_keys(cluster, data)
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
    assert_moved_without_events(cluster, data, start)


def links_at(report: object, port: int) -> list[dict[str, object]]:
    links = getattr(report, "links", None) or []
    return [link for link in links if link["address"] == f"127.0.0.1:{port}"]


def test_a_retired_master_given_slots_again_is_followed_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    following, start = follow_still_keys(cluster, data)
    leaving, staying = cluster.master_ports()[:2]
    with contextlib.closing(cluster.client(leaving)) as node:
        node.config_set("cluster-allow-replica-migration", "no")  # it stays an empty master
    under_writes(cluster, 0, lambda: reshard(cluster, leaving, staying, 5461))

    def emptied(report: object) -> bool:
        (link,) = links_at(report, leaving)
        return link["state"] == "connected" and not link["slots"]

    following.until(emptied, "the emptied master's link to serve no slot")
    with contextlib.closing(cluster.client(leaving)) as node:
        node.execute_command("CLIENT", "KILL", "TYPE", "replica")  # moonish's link among them
    following.until(
        lambda report: [link["state"] for link in links_at(report, leaving)] == ["retired"],
        "the link of the master without slots to retire",
    )
    time.sleep(2.5)  # topology reads see it as a master without slots: no second link
    assert [link["state"] for link in links_at(following.report, leaving)] == ["retired"]

    under_writes(cluster, 1000, lambda: reshard(cluster, staying, leaving, 1000))
    client = writer(cluster)
    mixed_writes(client, 10_000, 100)
    client.close()
    caught_up_report(following, cluster)

    def served_again(report: object) -> bool:
        (link,) = links_at(report, leaving)
        slots = link["slots"]
        assert isinstance(slots, list)
        return link["state"] == "connected" and sum(b - a + 1 for a, b in slots) == 1000

    following.until(served_again, "the resumed link to serve the 1,000 slots")
    following.finish()
    assert any("serves slots again" in event.text for event in following.events)
    assert_moved_without_events(cluster, data, start)
