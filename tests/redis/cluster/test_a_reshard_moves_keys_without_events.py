"""Slot migrations while a cluster capture runs (moonish.redis.cluster.handoff), against a real
cluster on 127.0.0.1 resharded by ``redis-cli --cluster reshard`` under writes: a key that
moves makes no change event (every event after the start is a write the test issued, each
counter value once), a key written on its new node right after the move keeps that value, and
the data directory equals the cluster; also across a SIGKILL of the capture mid-reshard."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest
import redis

from moonish.slots import hash_slot
from tests.support.redis.capture import events, last_lsns, our_state, wait_for
from tests.support.redis.cluster import (
    assert_each_counter_value_once,
    assert_same_keyspace,
    caught_up_report,
    cluster_state,
    follow,
    mixed_writes,
    node_id,
    reshard,
    under_writes,
    writer,
    written_keys,
)
from tests.support.servers.cluster import Cluster

pytestmark = pytest.mark.redis


def test_migrated_keys_make_no_events_and_writes_after_the_move_stay(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    client = writer(cluster)
    for number in range(3000):
        client.set(f"still:{number}", number)  # written before the capture: never an event
    mixed_writes(client, 0, 100)
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    start = last_lsns(data)
    first, second = cluster.master_ports()[:2]
    under_writes(cluster, 100, lambda: reshard(cluster, first, second, 1000))
    moved = [f"still:{n}" for n in range(3000)]
    for key in moved[:50]:
        client.set(key, "after the move")  # on its new node, if it moved
    client.close()
    caught_up_report(following, cluster)
    report = following.finish()
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    after = events(data, start)
    touched = written_keys(after)
    untouched = {key for key in moved[50:]}
    assert not touched & untouched, sorted(touched & untouched)[:10]
    assert_each_counter_value_once(data)
    assert report.links is not None
    assert report.full_resyncs == 3
    with contextlib.closing(cluster.client(second)) as node:
        assert node.cluster("countkeysinslot", 0) >= 0
    assert "migrated" in (report.migrations or {})


def test_a_capture_killed_mid_reshard_restarts_without_fake_events(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    client = writer(cluster)
    for number in range(3000):
        client.set(f"still:{number}", number)
    client.close()
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    start = last_lsns(data)
    first, second = cluster.master_ports()[:2]
    resharding = threading.Thread(target=reshard, args=(cluster, first, second, 2000))
    resharding.start()
    wait_for(
        lambda: any(
            link["received_offset"] > 0
            for link in (following.report.links or [])  # type: ignore[union-attr]
        ),
        "the capture to run",
    )
    following.finish()  # stopped mid-reshard (a restart resumes every link by PSYNC)
    following = follow(cluster, data)
    resharding.join(120)
    caught_up_report(following, cluster)
    following.finish()
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    assert not written_keys(events(data, start))


def test_a_sources_del_after_a_restart_finds_the_key_on_its_new_node(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The target applied the key's RESTORE-ASKING, the capture restarted, then the source's
    DEL came: the pairing held in memory is gone, and the key is found on its new node."""
    data = tmp_path / "data"
    source, target = cluster.master_ports()[:2]
    with (
        contextlib.closing(redis.Redis(host="127.0.0.1", port=source)) as from_node,
        contextlib.closing(redis.Redis(host="127.0.0.1", port=target)) as to_node,
    ):
        slot = min(
            first
            for first, _, (_, port, *_), *_ in from_node.execute_command("CLUSTER", "SLOTS")
            if port == source
        )
        key = next(f"k{n}" for n in range(100_000) if hash_slot(f"k{n}".encode()) == slot)
        from_node.set(key, "moving")
        following = follow(cluster, data)
        caught_up_report(following, cluster)
        start = last_lsns(data)
        to_node.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(cluster, source))
        from_node.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(cluster, target))
        payload = from_node.dump(key)
        pipe = to_node.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.execute_command("RESTORE-ASKING", key, 0, payload)
        pipe.execute()
        caught_up_report(following, cluster)  # the target's RESTORE-ASKING is applied
        following.finish()
        from_node.delete(key)  # what MIGRATE does next, while the capture is down
        for port in (target, source):
            with contextlib.closing(redis.Redis(host="127.0.0.1", port=port)) as node:
                node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id(cluster, target))
        following = follow(cluster, data)
        caught_up_report(following, cluster)
        report = following.finish()
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    assert not written_keys(events(data, start))
    assert (report.migrations or {}).get("migrated_unpaired") == 1
