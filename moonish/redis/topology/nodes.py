"""A Redis Cluster's nodes as its ``CLUSTER NODES`` and ``CLUSTER SHARDS`` replies describe
them, and the slot table they settle to.

``CLUSTER NODES`` (Redis ``cluster_legacy.c`` ``clusterGenNodeDescription``; every version with
a cluster) is one text line per node::

    <id> <ip>:<port>@<cport>[,<hostname>] <flags> <master id or -> <ping sent ms>
        <pong received ms> <config epoch> <link state> <slot or range>...

``flags`` is a comma-separated list (``myself``, ``master``, ``slave``, ``fail?``, ``fail``,
``handshake``, ``noaddr``, ``nofailover``, ``noflags``); slots are ``n`` or ``first-last``; the
node that answers (``myself``) also lists its slots in migration: ``[<slot>->-<node id>]``
(migrating to) and ``[<slot>-<-<node id>]`` (importing from). Only this reply carries config
epochs and those states (``CLUSTER SHARDS`` and ``CLUSTER SLOTS`` do not).

``CLUSTER SHARDS`` (Redis 7.0+, ``clusterCommandShards``) is, per shard, a map of ``slots``
(a flat list of first, last pairs) and ``nodes`` (maps with ``id``, ``port``, ``tls-port``,
``ip``, ``endpoint``, ``hostname``, ``role``, ``replication-offset``, ``health``); it adds
each node's preferred endpoint, TLS port, replication offset and health to the layout.

The slot table follows Redis's rule for conflicting claims (``clusterUpdateSlotsConfigWith``):
a slot two masters claim belongs to the one with the greater config epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from moonish.redis.replication.resp import ReplicationProtocolError
from moonish.slots import SLOT_COUNT as SLOTS

MASTER, REPLICA = "master", "replica"


class TopologyError(ReplicationProtocolError):
    """A cluster's reply that does not describe a topology (``path``: the node asked)."""


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One node of a cluster.

    Attributes:
        node_id: the node's 40-hex id.
        host: the address to connect to (``CLUSTER SHARDS`` ``endpoint`` when known, which
            honours ``cluster-preferred-endpoint-type``; else the ``ip``).
        port: the node's client port.
        role: :data:`MASTER` or :data:`REPLICA`.
        master_id: a replica's master's id (``None``: a master).
        config_epoch: the node's config epoch (a master's claim on its slots).
        flags: ``CLUSTER NODES`` flags (``myself`` left out), e.g. ``{"master", "fail"}``.
        slots: the slot ranges the node serves, ``(first, last)`` inclusive, ascending.
        tls_port: the TLS port (``CLUSTER SHARDS`` ``tls-port``; ``None``: not known).
        replication_offset: the node's replication offset (``CLUSTER SHARDS``; ``None``: not
            known).
        health: ``online``, ``failed`` or ``loading`` (``CLUSTER SHARDS``; without it,
            ``failed`` for a node flagged ``fail`` and ``online`` for the others).
        migrating: the slots this node migrates, each to the id of the importing node (only
            known from the node's own ``CLUSTER NODES``).
        importing: the slots this node imports, each from the id of the migrating node.
    """

    node_id: str
    host: str
    port: int
    role: str
    master_id: str | None
    config_epoch: int
    flags: frozenset[str]
    slots: tuple[tuple[int, int], ...]
    tls_port: int | None = None
    replication_offset: int | None = None
    health: str = "online"
    migrating: Mapping[int, str] = field(default_factory=dict)
    importing: Mapping[int, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    @property
    def usable(self) -> bool:
        """Whether a link may go to it: not failed, not in handshake, with an address."""
        bad = {"fail", "handshake", "noaddr"}
        return not (self.flags & bad) and self.health == "online"

    def slot_count(self) -> int:
        return sum(last - first + 1 for first, last in self.slots)


@dataclass(frozen=True, slots=True)
class Topology:
    """A cluster as one node sees it.

    Attributes:
        nodes: every node, masters first, each group in the order of its first slot (masters
            without slots after those with).
        seen_by: the id of the node that answered.
        current_epoch: ``CLUSTER INFO`` ``cluster_current_epoch`` (0: not asked).
        state: ``CLUSTER INFO`` ``cluster_state`` (``ok`` or ``fail``; ``""``: not asked).
    """

    nodes: tuple[ClusterNode, ...]
    seen_by: str
    current_epoch: int = 0
    state: str = ""

    def node(self, node_id: str) -> ClusterNode | None:
        for each in self.nodes:
            if each.node_id == node_id:
                return each
        return None

    def masters(self) -> list[ClusterNode]:
        """The masters that own slots in :meth:`slot_table`, in the order of their first slot."""
        owners = set(self.slot_table())
        return [node for node in self.nodes if node.node_id in owners]

    def linkable(self) -> list[ClusterNode]:
        """The masters a capture follows: those that own slots (:meth:`masters`), then the
        other usable masters (a node just added, before a reshard gives it slots)."""
        owners = self.masters()
        spare = [
            node
            for node in self.nodes
            if node.role == MASTER and node.usable and node not in owners and node.address
        ]
        return owners + spare

    def replicas_of(self, master_id: str) -> list[ClusterNode]:
        return [node for node in self.nodes if node.master_id == master_id]

    def reader_of(self, master: ClusterNode, prefer_replica: bool) -> ClusterNode:
        """The node a capture reads ``master``'s replication stream from: with
        ``prefer_replica``, its usable replica (``health`` ``online``: in sync) with the
        greatest ``replication_offset`` (ties: the smaller node id); else, or when it has
        none, ``master`` itself. A replica proxies its master's stream byte for byte, with the
        same replication ID and offsets (Redis ``replication.c``,
        ``replicationFeedStreamFromMasterStream``)."""
        if not prefer_replica:
            return master
        replicas = [node for node in self.replicas_of(master.node_id) if node.usable]
        if not replicas:
            return master
        return min(replicas, key=lambda node: (-(node.replication_offset or 0), node.node_id))

    def slot_table(self) -> list[str | None]:
        """Per hash slot (0..16383), the id of the master that owns it, or ``None``: no master
        claims it. A slot two masters claim goes to the greater config epoch
        (``clusterUpdateSlotsConfigWith``)."""
        table: list[str | None] = [None] * SLOTS
        epochs = [-1] * SLOTS
        for node in self.nodes:
            if node.role != MASTER:
                continue
            for first, last in node.slots:
                for slot in range(first, last + 1):
                    if node.config_epoch > epochs[slot]:
                        table[slot], epochs[slot] = node.node_id, node.config_epoch
        return table

    def uncovered(self) -> list[tuple[int, int]]:
        """The slot ranges no master owns (a cluster with these answers ``CLUSTERDOWN``)."""
        return ranges(slot for slot, owner in enumerate(self.slot_table()) if owner is None)

    def migrations(self) -> dict[int, tuple[str, str]]:
        """Slots in migration that the nodes' own lines show: slot → (from id, to id)."""
        found: dict[int, tuple[str, str]] = {}
        for node in self.nodes:
            for slot, target in node.migrating.items():
                found[slot] = (node.node_id, target)
            for slot, source in node.importing.items():
                found.setdefault(slot, (source, node.node_id))
        return found

    def describe(self) -> str:
        """One line per master: ``host:port (id prefix) slots a-b,c``, with its replicas."""
        lines = []
        for master in self.masters():
            slots = ",".join(
                str(first) if first == last else f"{first}-{last}" for first, last in master.slots
            )
            replicas = ", ".join(node.address for node in self.replicas_of(master.node_id))
            lines.append(
                f"{master.address} ({master.node_id[:8]}) slots {slots}"
                + (f", replicas {replicas}" if replicas else "")
            )
        return "; ".join(lines)


def ranges(slots: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending slots as inclusive ``(first, last)`` ranges."""
    found: list[tuple[int, int]] = []
    for slot in slots:
        if found and found[-1][1] == slot - 1:
            found[-1] = (found[-1][0], slot)
        else:
            found.append((slot, slot))
    return found


def parse_cluster_nodes(text: str, path: str) -> Topology:
    """The :class:`Topology` of a ``CLUSTER NODES`` reply (module docstring), as the node at
    ``path`` sees it; health comes from the flags (``fail`` → ``failed``).

    Raises:
        TopologyError: a line that is not a node's description.
    """
    nodes: list[ClusterNode] = []
    myself = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        node, is_myself = _parse_line(line, path)
        nodes.append(node)
        if is_myself:
            myself = node.node_id
    if not myself:
        raise TopologyError(
            f"CLUSTER NODES without the answering node (myself): {text[:200]!r}", path=path
        )
    return Topology(_ordered(nodes), myself)


def _parse_line(line: str, path: str) -> tuple[ClusterNode, bool]:
    words = line.split()
    if len(words) < 8:
        raise TopologyError(f"a CLUSTER NODES line of {len(words)} fields: {line!r}", path=path)
    node_id, address, flag_text, master, _, _, epoch_text, _ = words[:8]
    host_port = address.split("@", 1)[0].split(",", 1)[0]
    host, colon, port_text = host_port.rpartition(":")
    flags = frozenset(flag_text.split(",")) - {"myself", "noflags"}
    migrating: dict[int, str] = {}
    importing: dict[int, str] = {}
    slots: list[tuple[int, int]] = []
    try:
        port = int(port_text) if colon else 0
        config_epoch = int(epoch_text)
        for word in words[8:]:
            if word.startswith("["):
                body = word.strip("[]")
                if "->-" in body:
                    slot, target = body.split("->-", 1)
                    migrating[int(slot)] = target
                elif "-<-" in body:
                    slot, source = body.split("-<-", 1)
                    importing[int(slot)] = source
                continue
            first, _, last = word.partition("-")
            slots.append((int(first), int(last or first)))
    except ValueError:
        raise TopologyError(
            f"a CLUSTER NODES line that does not parse: {line!r}", path=path
        ) from None
    role = REPLICA if "slave" in flags else MASTER
    node = ClusterNode(
        node_id=node_id,
        host=host,
        port=port,
        role=role,
        master_id=None if master == "-" else master,
        config_epoch=config_epoch,
        flags=flags,
        slots=tuple(sorted(slots)),
        health="failed" if "fail" in flags else "online",
        migrating=migrating,
        importing=importing,
    )
    return node, "myself" in flag_text.split(",")


def with_shards(topology: Topology, reply: object, path: str) -> Topology:
    """``topology`` with what a ``CLUSTER SHARDS`` reply adds (endpoint, TLS port,
    replication offset, health) for the nodes both name.

    Raises:
        TopologyError: a reply that is not ``CLUSTER SHARDS``'s.
    """
    details: dict[str, dict[str, object]] = {}
    if not isinstance(reply, list):
        raise TopologyError(f"CLUSTER SHARDS is not a list: {reply!r:.200}", path=path)
    for shard in reply:
        members = pairs(shard, path).get("nodes") or []
        if not isinstance(members, list):
            raise TopologyError(f"CLUSTER SHARDS nodes: {members!r:.200}", path=path)
        for node in members:
            attributes = pairs(node, path)
            node_id = attributes.get("id")
            if isinstance(node_id, str):
                details[node_id] = attributes
    nodes = []
    for node in topology.nodes:
        found = details.get(node.node_id)
        if found is not None:
            node = _detailed(node, found)
        nodes.append(node)
    return replace(topology, nodes=tuple(nodes))


def _detailed(node: ClusterNode, found: dict[str, object]) -> ClusterNode:
    endpoint = found.get("endpoint")
    host = endpoint if isinstance(endpoint, str) and endpoint not in ("", "?") else node.host
    tls_port = found.get("tls-port")
    offset = found.get("replication-offset")
    health = found.get("health")
    return replace(
        node,
        host=host,
        tls_port=tls_port if isinstance(tls_port, int) and tls_port else None,
        replication_offset=offset if isinstance(offset, int) else None,
        health=health if isinstance(health, str) else node.health,
    )


def pairs(value: object, path: str) -> dict[str, object]:
    """A RESP2 flat list of name, value pairs (or a RESP3 map) as a dict of text names and
    values (bulk strings decoded).

    Raises:
        TopologyError: ``value`` is neither (``path``: the node asked).
    """
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list) and len(value) % 2 == 0:
        items = list(zip(value[::2], value[1::2], strict=True))
    else:
        raise TopologyError(f"not name/value pairs: {value!r:.200}", path=path)
    found: dict[str, object] = {}
    for name, item in items:
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        found[str(name)] = item.decode(errors="replace") if isinstance(item, bytes) else item
    return found


def _ordered(nodes: list[ClusterNode]) -> tuple[ClusterNode, ...]:
    def order(node: ClusterNode) -> tuple[int, int, str]:
        first = node.slots[0][0] if node.slots else SLOTS
        return (0 if node.role == MASTER else 1, first, node.node_id)

    return tuple(sorted(nodes, key=order))
