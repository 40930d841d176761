"""Reading a cluster's topology from its nodes, on side connections apart from the replication
links (docs/design/cluster-capture.md §1).

The exchange with a seed node (RESP2, replies parsed with hiredis; ``AUTH`` first when the URL
has credentials, as moonish.redis.replication.probe)::

    -> INFO cluster          <- "cluster_enabled:1"           (0: not a cluster node)
    -> CLUSTER NODES         <- one line per node             (moonish.redis.topology.nodes)
    -> CLUSTER SHARDS        <- endpoints, health, offsets    (Redis 7.0+; "unknown
                                                               subcommand" before: left out)
    -> CLUSTER INFO          <- cluster_state, cluster_current_epoch

and, with ``states``, ``CLUSTER NODES`` of every master that owns slots, since a node shows
its slots in migration (``MIGRATING``/``IMPORTING``) only on its own line (Redis
``cluster_legacy.c`` ``clusterGenNodeDescription``). The user needs ``+info +cluster|nodes
+cluster|shards +cluster|info``.

Example::

    with ClusterProbe("redis://127.0.0.1:7000") as probe:
        if probe.cluster_enabled():
            topology = probe.topology()
            print(topology.describe())
"""

from __future__ import annotations

from dataclasses import replace
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

from moonish.redis.replication.messages import ReplicaOptions, ReplicationRefusedError
from moonish.redis.replication.probe import MasterProbe, info_fields
from moonish.redis.topology.nodes import (
    ClusterNode,
    Topology,
    TopologyError,
    parse_cluster_nodes,
    with_shards,
)


def node_url(url: str, node: ClusterNode) -> str:
    """The URL of ``node`` with the scheme and credentials of ``url`` (a cluster's nodes share
    them); ``rediss://`` goes to the node's TLS port when ``CLUSTER SHARDS`` named one."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    port = node.tls_port if parts.scheme == "rediss" and node.tls_port else node.port
    host = f"[{node.host}]" if ":" in node.host else node.host
    netloc = f"{auth}@{host}:{port}" if auth else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, "", "", ""))


class ClusterProbe:
    """Side connections to a seed node (and, for slot states, to each master). Not
    thread-safe.

    Args:
        url: the seed node's ``redis[s]://`` URL (the credentials and TLS files serve every
            node).
        options: the links' options (``connect_timeout_ms``, TLS files).
        timeout_ms: how long one answer may take.

    Raises:
        InvalidArgumentError: a bad URL.
    """

    def __init__(
        self, url: str, options: ReplicaOptions | None = None, timeout_ms: int = 5_000
    ) -> None:
        self.url = url
        self._options = options
        self._timeout_ms = timeout_ms
        self._seed = MasterProbe(url, options, timeout_ms)
        self.path = self._seed.path

    def cluster_enabled(self) -> bool:
        """Whether the node runs in cluster mode (``INFO cluster`` ``cluster_enabled:1``).

        Raises:
            UnavailableError, ReplicationAuthError, ReplicationRefusedError,
            ReplicationProtocolError: as :meth:`MasterProbe.command`.
        """
        reply = self._seed.command(b"INFO", b"cluster")
        if not isinstance(reply, bytes):
            raise TopologyError(f"INFO cluster replied {reply!r:.200}", path=self.path)
        return info_fields(reply.decode(errors="replace")).get("cluster_enabled") == "1"

    def topology(self, states: bool = True) -> Topology:
        """The cluster as the seed sees it (module docstring); with ``states``, each master's
        slots in migration from its own ``CLUSTER NODES`` (a master that cannot be asked keeps
        none: the next read asks again).

        Raises:
            UnavailableError, ReplicationAuthError, ReplicationRefusedError: as
                :meth:`MasterProbe.command` (the seed's).
            TopologyError: a reply that does not describe a topology.
        """
        topology = parse_cluster_nodes(self._text(self._seed, b"NODES"), self.path)
        try:
            shards = self._seed.command(b"CLUSTER", b"SHARDS")
        except ReplicationRefusedError as exc:  # before Redis 7.0: the layout is NODES' own
            if "unknown subcommand" not in (exc.reply or "").lower():
                raise
        else:
            topology = with_shards(topology, shards, self.path)
        fields = info_fields(self._text(self._seed, b"INFO"))
        topology = replace(
            topology,
            state=fields.get("cluster_state", ""),
            current_epoch=int(fields.get("cluster_current_epoch", "0") or 0),
        )
        if states:
            topology = self._with_states(topology)
        return topology

    def _with_states(self, topology: Topology) -> Topology:
        nodes = list(topology.nodes)
        for index, node in enumerate(nodes):
            if node.role != "master" or not node.usable:
                continue
            if node.node_id == topology.seen_by:
                continue  # the seed's line already has its states
            with MasterProbe(node_url(self.url, node), self._options, self._timeout_ms) as probe:
                own = parse_cluster_nodes(self._text(probe, b"NODES"), probe.path)
            mine = own.node(own.seen_by)
            if mine is not None:
                nodes[index] = replace(node, migrating=mine.migrating, importing=mine.importing)
        return replace(topology, nodes=tuple(nodes))

    def _text(self, probe: MasterProbe, subcommand: bytes) -> str:
        reply = probe.command(b"CLUSTER", subcommand)
        if not isinstance(reply, bytes):
            name = subcommand.decode()
            raise TopologyError(f"CLUSTER {name} replied {reply!r:.200}", path=probe.path)
        return reply.decode(errors="replace")

    def close(self) -> None:
        self._seed.close()

    def __enter__(self) -> ClusterProbe:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
