"""A whole Redis Cluster captured as one source (moonish.redis.cluster), against a real cluster
on 127.0.0.1 (3 masters with a replica each): one link per master into one data directory,
equal to the union of the masters' keyspaces; a restart continues every link by PSYNC with no
command applied twice (also after SIGKILL); a link whose backlog was overrun resyncs alone, as
the differences of its node's slots; the CLI follows a cluster node and ``cdc info`` shows the
links; another cluster is refused."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from moonish.redis.cluster.links import slot_set
from moonish.redis.cluster.runner import capture_cluster
from moonish.redis.routing.sources import SourceMismatchError
from moonish.redis.topology.probe import ClusterProbe
from moonish.slots import hash_slot
from tests.support.cli import MOONISH, run
from tests.support.paths import ROOT
from tests.support.redis.capture import (
    FAST,
    events,
    last_lsns,
    our_state,
    wait_for,
)
from tests.support.redis.cluster import (
    assert_each_counter_value_once,
    assert_same_keyspace,
    caught_up_report,
    cli_capture_info,
    cluster_state,
    follow,
    mixed_writes,
    snapshot_marks,
    writer,
)
from tests.support.servers.cluster import Cluster, redis_cluster

pytestmark = pytest.mark.redis


def test_one_link_per_master_and_the_keyspace_is_the_clusters(
    cluster: Cluster, tmp_path: Path
) -> None:
    client = writer(cluster)
    mixed_writes(client, 0, 300)  # before: the full resyncs' rows
    following = follow(cluster, tmp_path / "data")
    mixed_writes(client, 300, 600)  # while it follows
    caught_up_report(following, cluster)
    report = following.finish()
    client.close()
    assert_same_keyspace(our_state(tmp_path / "data"), cluster_state(cluster))
    assert_each_counter_value_once(tmp_path / "data")
    assert report.full_resyncs == 3 and report.links is not None
    masters = sorted(cluster.master_ports())
    assert sorted(int(link["address"].rsplit(":", 1)[1]) for link in report.links) == masters
    covered = sorted(
        slot for link in report.links for first, last in link["slots"] for slot in (first, last)
    )
    assert covered[0] == 0 and covered[-1] == 16383
    for link in report.links:
        assert link["link"] == link["node"] and len(link["replid"]) == 40
        assert link["state"] == "stopped" and link["full_resyncs"] == 1
    # the first loads read as one snapshot: one "first" row and one "last"
    marks = snapshot_marks(tmp_path / "data")
    assert len(marks) == report.rdb_keys
    assert marks.count("first") == 1 and marks.count("last") == 1
    assert (marks[0], marks[-1]) == ("first", "last")
    psyncs = [event for event in following.events if event.kind == "psync"]
    assert len(psyncs) == 3 and all("link" in event.fields for event in psyncs)


def test_a_restart_continues_every_link_by_psync(cluster: Cluster, tmp_path: Path) -> None:
    client = writer(cluster)
    data = tmp_path / "data"
    following = follow(cluster, data)
    mixed_writes(client, 0, 300)
    caught_up_report(following, cluster)
    following.finish()
    mixed_writes(client, 300, 300)  # while it is stopped
    marks = last_lsns(data)
    # another seed of the same cluster: the links decide, not the address
    following = follow(cluster, data, cluster.ports[-1])
    mixed_writes(client, 600, 300)
    caught_up_report(following, cluster)
    report = following.finish()
    client.close()
    assert report.full_resyncs == 0 and report.continues == 3
    assert report.links is not None
    assert all(link["partial_resyncs"] == 1 for link in report.links)
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    assert not [e for e in events(data, marks) if e["op"] == "r"]
    assert_each_counter_value_once(data)


def test_a_link_past_its_backlog_resyncs_alone_as_differences_of_its_slots(
    cluster: Cluster, tmp_path: Path
) -> None:
    client = writer(cluster)
    data = tmp_path / "data"
    mixed_writes(client, 0, 200)
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    following.finish()
    first = cluster.master_ports()[0]
    with contextlib.closing(cluster.client(first)) as node:
        node.config_set("repl-backlog-size", 16 * 1024)  # Redis's smallest
    with ClusterProbe(cluster.url(first)) as probe:
        topology = probe.topology(states=False)
    served = slot_set(topology.node(topology.seen_by))  # type: ignore[arg-type]
    mine = [
        key
        for key in (f"string:{n}" for n in range(200))
        if hash_slot(key.encode()) in served and client.exists(key)
    ]
    gone, mine = mine[:5], mine[5:]
    for key in gone:
        client.delete(key)
    for number in range(3000):  # past that master's backlog (its slots' keys only)
        key = mine[number % len(mine)] if number % 2 else f"big:{number}"
        if hash_slot(key.encode()) in served:
            client.set(key, "v" * 64 + str(number))
    client.set(mine[10], "changed")
    marks = last_lsns(data)
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    report = following.finish()
    client.close()
    assert report.links is not None
    by_port = {int(link["address"].rsplit(":", 1)[1]): link for link in report.links}
    assert by_port[first]["full_resyncs"] == 1 and by_port[first]["partial_resyncs"] == 0
    assert all(link["partial_resyncs"] == 1 for port, link in by_port.items() if port != first)
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    changes = events(data, marks)
    assert changes and all(
        hash_slot((e["after"] or e["before"])["key"].encode()) in served
        for e in changes
        if e["op"] in "cud"
    )
    deleted = {e["before"]["key"] for e in changes if e["op"] == "d"}
    assert set(gone) <= deleted


def test_a_sigkilled_capture_restarts_without_applying_a_command_twice(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    args = [*MOONISH, "wal", "capture", cluster.url(), str(data), "--shards", "4", "--quiet"]
    client = writer(cluster)
    stop = threading.Event()

    def load() -> None:
        number = 0
        while not stop.is_set():
            mixed_writes(client, number, 20)
            number += 20

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        for _ in range(2):
            process = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.DEVNULL)
            wait_for(lambda: (data / "capture.json").exists(), "capture.json", 60)
            time.sleep(1.5)
            process.send_signal(signal.SIGKILL)
            process.wait(30)
    finally:
        stop.set()
        loader.join(30)
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:

        def whole() -> bool:
            info = run("cdc", "info", str(data))
            status = json.loads(info.stdout).get("capture") or {}
            links = status.get("links") or []
            return len(links) == 3 and all(link["bytes_behind"] == 0 for link in links)

        time.sleep(1.5)
        wait_for(whole, "the restarted capture to catch up", 90)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr.decode()
    client.close()
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    assert_each_counter_value_once(data)


def test_the_cli_follows_a_cluster_and_cdc_info_shows_its_links(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    client = writer(cluster)
    mixed_writes(client, 0, 50)
    info, summary, stderr = cli_capture_info(cluster.url(), str(data), "--shards", "2")
    client.close()
    links = info["capture"]["links"]
    assert sorted(int(link["address"].rsplit(":", 1)[1]) for link in links) == sorted(
        cluster.master_ports()
    )
    assert {link["state"] for link in links} == {"connected"}
    assert len(summary["links"]) == 3
    assert b"+FULLRESYNC" in stderr and b"link " in stderr
    assert info["shards"][0]["source_position"]["position"]["links"]


def test_another_clusters_nodes_do_not_continue_the_links(cluster: Cluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    following.finish()
    with (
        redis_cluster(tmp_path / "other") as other,
        pytest.raises(SourceMismatchError, match="no master of this cluster continues"),
    ):
        capture_cluster(other.url(), data, 4, options=FAST)


def test_a_flushall_on_one_master_removes_only_that_masters_keys(
    cluster: Cluster, tmp_path: Path
) -> None:
    client = writer(cluster)
    mixed_writes(client, 0, 100)
    following = follow(cluster, tmp_path / "data")
    caught_up_report(following, cluster)
    flushed = cluster.master_ports()[1]
    with contextlib.closing(cluster.client(flushed)) as node:
        node.flushall()
        assert node.dbsize() == 0
    mixed_writes(client, 100, 50)
    caught_up_report(following, cluster)
    following.finish()
    client.close()
    state = cluster_state(cluster)
    assert len(state) > 100 and our_state(tmp_path / "data") == state
