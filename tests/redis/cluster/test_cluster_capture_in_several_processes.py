"""A cluster capture in several processes (moonish.redis.cluster.workers), against a real
cluster on 127.0.0.1 (3 masters with a replica each): with ``processes=2`` over 4 shards the
data directory equals the cluster and every key's events are those of a capture in one
process that ran alongside; a restart continues every link by PSYNC; a reshard under writes
moves keys without events (decided by the worker that owns each key, and counted); a master
killed is followed to its promoted replica; the CLI takes ``--processes`` for a cluster; a
worker that dies stops the capture with an UnavailableError."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from moonish.errors import UnavailableError
from tests.support.redis.capture import events, last_lsns, our_state, wait_for
from tests.support.redis.cluster import (
    assert_captured,
    assert_each_counter_value_once,
    assert_same_keyspace,
    caught_up_report,
    cli_capture_info,
    cluster_state,
    follow,
    kill_first_master,
    mixed_writes,
    reshard,
    snapshot_marks,
    under_writes,
    writer,
    written_keys,
)
from tests.support.servers.cluster import Cluster

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def per_key(data: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every key's events in its shard's order: (op, the value after), commit times and
    snapshot marks left out."""
    found: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for envelope in events(data):
        image = envelope["after"] or envelope["before"]
        if image is None:
            continue
        after = envelope["after"]
        found[image["key"]].append((envelope["op"], None if after is None else after["value"]))
    return dict(found)


def test_two_processes_write_what_one_process_writes(cluster: Cluster, tmp_path: Path) -> None:
    client = writer(cluster)
    mixed_writes(client, 0, 300)  # before: the full resyncs' rows
    alone = follow(cluster, tmp_path / "one")
    several = follow(cluster, tmp_path / "two", processes=2)
    caught_up_report(alone, cluster)
    caught_up_report(several, cluster)
    mixed_writes(client, 300, 600)  # while both follow
    caught_up_report(alone, cluster)
    caught_up_report(several, cluster)
    report = several.finish()
    alone.finish()
    client.close()
    assert_captured(cluster, tmp_path / "two")
    assert per_key(tmp_path / "two") == per_key(tmp_path / "one")
    assert report.full_resyncs == 3 and report.links is not None
    assert [link["state"] for link in report.links] == ["stopped"] * 3
    marks = snapshot_marks(tmp_path / "two")  # the workers' loads read as one snapshot
    assert len(marks) == report.rdb_keys
    assert marks.count("first") == 1 and marks.count("last") == 1
    assert (marks[0], marks[-1]) == ("first", "last")
    assert report.commands > 0 and report.records == sum(report.per_shard)
    assert all(report.per_shard)  # each worker wrote its shards
    assert not list((tmp_path / "two").glob(".resync-*.rdb"))  # the spooled RDBs are gone


def test_a_restart_in_two_processes_continues_every_link_by_psync(
    cluster: Cluster, tmp_path: Path
) -> None:
    client = writer(cluster)
    data = tmp_path / "data"
    following = follow(cluster, data, processes=2)
    mixed_writes(client, 0, 300)
    caught_up_report(following, cluster)
    following.finish()
    mixed_writes(client, 300, 300)  # while it is stopped
    marks = last_lsns(data)
    following = follow(cluster, data, processes=2)
    mixed_writes(client, 600, 300)
    caught_up_report(following, cluster)
    report = following.finish()
    assert report.full_resyncs == 0 and report.continues == 3
    assert report.links is not None
    assert all(link["partial_resyncs"] == 1 for link in report.links)
    assert not [e for e in events(data, marks) if e["op"] == "r"]
    following = follow(cluster, data)  # one process again: the same positions
    mixed_writes(client, 900, 100)
    caught_up_report(following, cluster)
    report = following.finish()
    client.close()
    assert report.full_resyncs == 0 and report.continues == 3
    assert_captured(cluster, data)


def test_a_reshard_in_two_processes_moves_keys_without_events(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    client = writer(cluster)
    for number in range(3000):
        client.set(f"still:{number}", number)  # written before the capture: never an event
    mixed_writes(client, 0, 100)
    following = follow(cluster, data, processes=2)
    caught_up_report(following, cluster)
    start = last_lsns(data)
    first, second = cluster.master_ports()[:2]
    under_writes(cluster, 100, lambda: reshard(cluster, first, second, 1000))
    client.close()
    caught_up_report(following, cluster)
    report = following.finish()
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    touched = written_keys(events(data, start))
    assert not {key for key in touched if key.startswith("still:")}
    assert_each_counter_value_once(data)
    assert (report.migrations or {}).get("migrated", 0) > 0  # counted by the workers


def test_a_killed_master_is_followed_in_two_processes(cluster: Cluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    client = writer(cluster)
    mixed_writes(client, 0, 200)
    following = follow(cluster, data, processes=2)
    caught_up_report(following, cluster)
    client.close()
    heir = kill_first_master(cluster)
    client = writer(cluster)
    mixed_writes(client, 200, 200)
    client.close()
    caught_up_report(following, cluster)
    report = following.finish()
    assert report.links is not None
    (moved,) = [link for link in report.links if link["address"] == f"127.0.0.1:{heir}"]
    assert moved["full_resyncs"] == 1 and moved["partial_resyncs"] == 1  # +CONTINUE
    assert_captured(cluster, data)


def test_the_cli_captures_a_cluster_in_two_processes(cluster: Cluster, tmp_path: Path) -> None:
    client = writer(cluster)
    mixed_writes(client, 0, 200)
    client.close()
    data = tmp_path / "data"
    info, summary, _ = cli_capture_info(
        cluster.url(), str(data), "--shards", "4", "--processes", "2", "--quiet"
    )
    assert {link["state"] for link in info["capture"]["links"]} == {"connected"}
    assert len(info["capture"]["links"]) == 3
    assert summary["full_resyncs"] == 3 and len(summary["links"]) == 3
    assert summary["rdb_keys"] > 0 and all(summary["per_shard"])
    assert_same_keyspace(our_state(data), cluster_state(cluster))


def test_a_worker_that_dies_is_an_unavailable_error(cluster: Cluster, tmp_path: Path) -> None:
    client = writer(cluster)
    mixed_writes(client, 0, 100)
    client.close()
    following = follow(cluster, tmp_path / "data", processes=2)
    caught_up_report(following, cluster)
    (worker,) = [
        child for child in multiprocessing.active_children() if child.name == "moonish-capture-1"
    ]
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)
    wait_for(lambda: bool(following.result), "the capture to stop")
    with pytest.raises(UnavailableError, match="capture worker moonish-capture-1 ended"):
        following.finish()
