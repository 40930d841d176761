"""``CLUSTER NODES`` and ``CLUSTER SHARDS`` replies read into a topology (moonish.redis.topology
.nodes), from lines in the form Redis's ``clusterGenNodeDescription`` writes: roles, slots,
migration states, failed nodes, and Redis's rule for a slot two masters claim."""

from __future__ import annotations

import pytest

from moonish.redis.topology.nodes import (
    SLOTS,
    TopologyError,
    parse_cluster_nodes,
    ranges,
    with_shards,
)

A, B, C, R = "a" * 40, "b" * 40, "c" * 40, "d" * 40

NODES = (
    f"{B} 127.0.0.1:7001@17001 master - 0 1700000000000 2 connected 5461-10922\n"
    f"{A} 127.0.0.1:7000@17000,node-a myself,master - 0 0 1 connected 0-5460 "
    f"[5461-<-{B}] [100->-{C}]\n"
    f"{R} 127.0.0.1:7003@17003 slave {A} 0 1700000000000 1 connected\n"
    f"{C} 127.0.0.1:7002@17002 master - 0 1700000000000 3 connected 10923-16383\n"
)


def test_masters_replicas_slots_and_epochs_are_read() -> None:
    topology = parse_cluster_nodes(NODES, "127.0.0.1:7000")
    assert topology.seen_by == A
    assert [node.node_id for node in topology.masters()] == [A, B, C]
    a = topology.node(A)
    assert a is not None and a.slots == ((0, 5460),) and a.config_epoch == 1
    assert a.address == "127.0.0.1:7000" and a.flags == {"master"}
    assert [node.node_id for node in topology.replicas_of(A)] == [R]
    replica = topology.node(R)
    assert replica is not None and replica.role == "replica" and replica.master_id == A
    assert topology.uncovered() == []
    assert topology.slot_table()[5460] == A and topology.slot_table()[5461] == B


def test_the_answering_nodes_migrations_are_read_from_its_own_line() -> None:
    topology = parse_cluster_nodes(NODES, "127.0.0.1:7000")
    assert topology.migrations() == {5461: (B, A), 100: (A, C)}


def test_a_slot_two_masters_claim_belongs_to_the_greater_config_epoch() -> None:
    stale = NODES.replace("10923-16383", "5000-5001 10923-16383")
    table = parse_cluster_nodes(stale, "x").slot_table()
    assert table[5000] == C and table[5001] == C and table[4999] == A
    lower = NODES.replace("1700000000000 3 connected", "1700000000000 0 connected")
    table = parse_cluster_nodes(lower.replace("10923-16383", "5000 10923-16383"), "x").slot_table()
    assert table[5000] == A


def test_failed_nodes_are_not_usable_and_lost_slots_are_uncovered() -> None:
    failed = NODES.replace("master - 0 1700000000000 3", "master,fail - 0 1700000000000 3")
    node = parse_cluster_nodes(failed, "x").node(C)
    assert node is not None and not node.usable and node.health == "failed"
    gone = "\n".join(line for line in NODES.splitlines() if not line.startswith(C))
    assert parse_cluster_nodes(gone, "x").uncovered() == [(10923, SLOTS - 1)]


def test_cluster_shards_adds_endpoints_tls_ports_offsets_and_health() -> None:
    reply = [
        [
            b"slots",
            [0, 5460],
            b"nodes",
            [
                [
                    b"id",
                    A.encode(),
                    b"port",
                    7000,
                    b"tls-port",
                    8000,
                    b"ip",
                    b"127.0.0.1",
                    b"endpoint",
                    b"node-a.example",
                    b"role",
                    b"master",
                    b"replication-offset",
                    1234,
                    b"health",
                    b"online",
                ],
                [
                    b"id",
                    R.encode(),
                    b"port",
                    7003,
                    b"ip",
                    b"127.0.0.1",
                    b"endpoint",
                    b"?",
                    b"role",
                    b"replica",
                    b"replication-offset",
                    1200,
                    b"health",
                    b"loading",
                ],
            ],
        ]
    ]
    topology = with_shards(parse_cluster_nodes(NODES, "x"), reply, "x")
    a, replica = topology.node(A), topology.node(R)
    assert a is not None and replica is not None
    assert (a.host, a.tls_port, a.replication_offset) == ("node-a.example", 8000, 1234)
    assert replica.host == "127.0.0.1" and replica.health == "loading" and not replica.usable


@pytest.mark.parametrize(
    "text",
    [
        f"{A} 127.0.0.1:7000@17000 master - 0 0 1 connected 0-5460\n",  # no myself
        f"{A} 127.0.0.1:7000@17000 myself,master - 0 0 one connected\n",
        f"{A} 127.0.0.1:7000 myself,master\n",
        f"{A} 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-x\n",
    ],
)
def test_a_reply_that_is_not_a_topology_is_an_error_naming_the_node(text: str) -> None:
    with pytest.raises(TopologyError) as raised:
        parse_cluster_nodes(text, "127.0.0.1:7000")
    assert raised.value.path == "127.0.0.1:7000"


def test_slots_group_into_ranges() -> None:
    assert ranges([0, 1, 2, 5, 7, 8]) == [(0, 2), (5, 5), (7, 8)]
    assert ranges([]) == []
