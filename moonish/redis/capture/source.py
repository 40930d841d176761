"""Which node a capture follows, and whether it continues the data directory's history.

A data directory's source is a replication history, not an address (docs/redis-source.md,
"Failover"). ``source.json`` remembers where the capture last followed it (``location``:
``host:port``, or a Sentinel URL without credentials), as a hint:

- the same location: follow it, as always (``PSYNC`` decides between continuing and a full
  resync, written as the differences: a restarted Redis keeps its data set);
- another node: follow it when its history holds the data directory's position, i.e. its
  ``master_replid`` or ``master_replid2`` (``INFO replication``; PSYNC2 keeps the replication
  ID before a failover as ``replid2``) is the replication ID the shards store. A promoted
  replica, or a replica of the same master, continues; a node with another history holds
  another data set and is refused (:class:`SourceMismatchError`), unless
  ``accept_new_source``: then its full resync is written as the differences;
- a Redis Cluster node: refused (:class:`ClusterNodeError`, naming the cluster's masters and
  slots) unless ``ReplicaOptions.cluster_node`` (``--no-cluster``): one node holds only its
  own slots' keys;
- a Sentinel URL: the node Sentinel names now (moonish.redis.replication.sentinel), asked
  again after every lost connection, so a failover Sentinel performs is followed; a node
  other than the last one is checked as above before its ``PSYNC``.
"""

from __future__ import annotations

from typing import Any

from moonish.errors import MoonishError, UnavailableError
from moonish.redis.replication.messages import (
    ClusterNodeError,
    ReplicaOptions,
    ReplicationAuthError,
    ReplicationRefusedError,
    parse_redis_url,
)
from moonish.redis.replication.probe import MasterProbe, MasterStream
from moonish.redis.replication.sentinel import find_master, is_sentinel_url, parse_sentinel_url
from moonish.redis.routing.sources import SourceMismatchError, load_source, stored_position
from moonish.redis.topology.probe import ClusterProbe


class MasterSource:
    """The master a capture follows: a ``redis[s]://`` URL's node, or the node a Sentinel
    URL's sentinels name now.

    Args:
        url: ``redis[s]://...`` or ``redis[s]+sentinel://...``.
        options: the link's options (timeouts, TLS), for the sentinels too.

    Attributes:
        location: what ``source.json`` remembers (``host:port``, or the Sentinel URL without
            credentials).
        sentinel: whether the master comes from Sentinel.

    Raises:
        InvalidArgumentError: a bad URL.
    """

    def __init__(self, url: str, options: ReplicaOptions) -> None:
        self.options = options
        self.sentinel = is_sentinel_url(url)
        self._sentinels = parse_sentinel_url(url) if self.sentinel else None
        if self._sentinels is not None:
            self.location = self._sentinels.path
            self._url: str | None = None
        else:
            address = parse_redis_url(url)
            self.location = f"{address.host}:{address.port}"
            self._url = url
        self.followed: str | None = None
        """The node last connected to (``host:port``), ``None`` before the first."""

    def url(self) -> str:
        """The master's ``redis[s]://`` URL (asking Sentinel when it is not known).

        Raises:
            UnavailableError: no sentinel named a node that answers as a master.
            InvalidArgumentError: no sentinel monitors a master of that name.
        """
        if self._url is None:
            assert self._sentinels is not None
            host, port = find_master(self._sentinels, self.options)
            self._url = self._sentinels.master_url(host, port)
        return self._url

    @property
    def path(self) -> str:
        """The master's address without credentials (the Sentinel URL's before it is
        asked)."""
        if self._url is None:
            assert self._sentinels is not None
            return self._sentinels.path
        return parse_redis_url(self._url).path

    def lost(self) -> None:
        """The connection to the master failed: ask Sentinel again before the next one."""
        if self._sentinels is not None:
            self._url = None

    def node(self) -> str:
        """``host:port`` of :meth:`url`."""
        address = parse_redis_url(self.url())
        return f"{address.host}:{address.port}"


def stored_history(shard_dirs: list[str]) -> tuple[str, int] | None:
    """The replication ID the shards of a capture store and the lowest offset stored under
    it, or ``None`` when no shard stores a replication position.

    Raises:
        CorruptionError: a stored position moonish did not write.
    """
    found: list[dict[str, Any]] = []
    for shard_dir in shard_dirs:
        stored = stored_position(shard_dir)
        if stored is not None and "replid" in stored[1]:
            found.append(stored[1])
    if not found:
        return None
    replid = str(found[0]["replid"])
    return replid, min(int(p["offset"]) for p in found if p["replid"] == replid)


def holds(stream: MasterStream, history: tuple[str, int]) -> bool:
    """Whether a node whose ``INFO replication`` is ``stream`` continues ``history``
    (``(replid, offset)``): the ID is its stream's, or the one before its last failover."""
    return stream.follows(history[0])


def check_node(
    source: MasterSource,
    history: tuple[str, int] | None,
    accept_new_source: bool,
    was: str,
) -> str | None:
    """Check that the master ``source`` names now continues ``history`` (the data
    directory's, ``None``: none yet) when it is not the node ``was``; returns a line saying
    what was decided, or ``None`` when there was nothing to decide.

    Raises:
        SourceMismatchError: its history does not hold the position (without
            ``accept_new_source``).
        UnavailableError: the node cannot be asked (``INFO replication``).
    """
    node = source.node()
    if history is None or node == was:
        return None
    with MasterProbe(source.url(), source.options) as probe:
        stream = probe.ask()
    replid, offset = history
    if holds(stream, history):
        return (
            f"{source.path} continues this data directory's history {replid} (offset {offset}; "
            f"followed at {was} before)"
        )
    theirs = stream.replid + (
        f", and {stream.replid2} before offset {stream.second_offset}"
        if stream.second_offset >= 0
        else ""
    )
    if accept_new_source:
        return (
            f"{source.path} (history {theirs}) taken as the new source: its full resync is "
            f"written as the differences from this data directory's keys"
        )
    raise SourceMismatchError(
        f"this data directory follows the Redis replication history {replid} (offset {offset}; "
        f"last followed at {was}); the master at {source.path} has the history {theirs}: "
        "another data set. Give --accept-new-source (accept_new_source=True) to take it (its "
        "full resync is written as the differences), or use a new data directory",
        path=source.path,
    )


def last_location(data_dir: str) -> str | None:
    """Where ``data_dir``'s capture last followed its master (``source.json``), or ``None``
    for a directory without a capture source."""
    stored = load_source(data_dir)
    if stored is None or stored["kind"] != "replica":
        return None
    return str(stored["location"])


def is_cluster_node(url: str, options: ReplicaOptions) -> bool:
    """Whether the node at ``url`` runs in cluster mode (``INFO cluster``); ``False`` for a
    Sentinel URL, and for a node that cannot be asked now (down, or a user without
    ``+info``): the replication link refuses a cluster node too (``ReplicaConnection.psync``).
    """
    if is_sentinel_url(url):
        return False
    try:
        with ClusterProbe(url, options) as probe:
            return probe.cluster_enabled()
    except (UnavailableError, ReplicationAuthError, ReplicationRefusedError):
        return False


def refuse_cluster_node(source: MasterSource) -> None:
    """Refuse a Redis Cluster node before anything is written (unless the options allow one,
    ``--no-cluster``), naming the cluster's masters and slots (:func:`is_cluster_node`).

    Raises:
        ClusterNodeError: the node runs in cluster mode.
    """
    if source.options.cluster_node or source.sentinel:
        return
    url = source.url()
    if not is_cluster_node(url, source.options):
        return
    try:
        with ClusterProbe(url, source.options) as probe:
            described = probe.topology(states=False).describe()
    except MoonishError:  # the refusal stands; only its detail is missing
        described = ""
    raise ClusterNodeError(parse_redis_url(url).path, described)
