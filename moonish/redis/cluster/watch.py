"""Reading a running cluster's topology again (moonish.redis.cluster.session): which node
serves a slot after a failover, each node's slots after a migration, masters added.

Asked of the capture's seeds in order (every node seen at the start, and every node seen
since) until one answers, on side connections (moonish.redis.topology.probe).
"""

from __future__ import annotations

from moonish.errors import MoonishError
from moonish.redis.replication.messages import ReplicaOptions
from moonish.redis.topology.nodes import ClusterNode, Topology
from moonish.redis.topology.probe import ClusterProbe

TOPOLOGY_INTERVAL_MS = 1_000
"""How often a running cluster capture reads the topology again."""


def read_any(
    seeds: list[str], options: ReplicaOptions, timeout_ms: int = 2_000
) -> tuple[Topology, str] | None:
    """The topology as the first of ``seeds`` (node URLs) that answers sees it, with that
    node's address; ``None`` when none answers."""
    for url in seeds:
        try:
            with ClusterProbe(url, options, timeout_ms) as probe:
                return probe.topology(states=False), probe.path
        except MoonishError:
            continue
    return None


def slot_owner(
    seeds: list[str], slot: int, options: ReplicaOptions
) -> tuple[ClusterNode | None, str]:
    """The master that serves ``slot`` as the first of ``seeds`` that answers sees the
    cluster, with that node's address; ``(None, "")`` when none answers or none claims the
    slot."""
    found = read_any(seeds, options)
    if found is None:
        return None, ""
    topology, seen_by = found
    owner = topology.slot_table()[slot]
    return (None if owner is None else topology.node(owner)), seen_by


def served(topology: Topology) -> dict[str, frozenset[int]]:
    """Per master's node id, the slots it serves (:meth:`Topology.slot_table`)."""
    found: dict[str, set[int]] = {}
    for slot, owner in enumerate(topology.slot_table()):
        if owner is not None:
            found.setdefault(owner, set()).add(slot)
    return {node: frozenset(slots) for node, slots in found.items()}
