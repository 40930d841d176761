"""Live capture of a whole Redis Cluster: one replication link per master, into one data
directory whose shards route keys by hash slot as always (docs/redis-source.md, "A Redis
Cluster").

``capture_cluster(url, data_dir, shards)`` reads the topology from the seed node at ``url``
(moonish.redis.topology), opens the shards (``source.json`` kind ``cluster``), gives each
master a link (moonish.redis.cluster.session) and runs until ``stop`` is set:

1. **Links.** A link's id is the node id of the master it first followed; each shard stores
   every link's position (moonish.redis.cluster.links). At a restart, a master whose node id
   names a stored link resumes it; a master that does not, but whose replication history
   holds a stored link's position (``INFO replication``: ``master_replid`` or
   ``master_replid2``; a replica promoted while the capture was down), continues that link;
   any other master is a new link. A stored link no master continues is retired (its node
   left the cluster; its slots' keys moved to other nodes, whose streams say so), unless no
   stored link is continued at all: another cluster, refused (:class:`SourceMismatchError`)
   unless ``accept_new_source``.
2. **Sync.** Each link ``PSYNC``s from its smallest stored offset (``+CONTINUE``), or loads its
   node's full resync: ``r`` rows into shards that hold nothing of the link (a first start's
   loads, one per link, form one snapshot: its first and last row), else the differences of
   that node's slots only (keys of other slots are other links' and never touched).
3. **Streams.** Every command of a cluster node touches one hash slot, so each link's commands
   land in the shards of its node's slots; one thread applies the links' batches in arrival
   order, syncs, acknowledges each link's durable offset and marks idle shards.
4. **Status.** ``capture.json`` (version 3) holds the capture's sums and ``links``: per link
   its node, address, slots, replication ID, offsets, bytes and seconds behind its node,
   state, and full and partial resync counts.

5. **Failover.** A link that loses its node reads the topology again before each reconnect
   and follows the master that serves its slots now, by ``PSYNC`` (moonish.redis.cluster
   .session).
6. **Topology changes.** The topology is read again every second: each link's slots follow
   its node's (a full resync's differences and a ``FLUSHALL`` reach only those), a master
   without a link (a node added and given slots) gets one, at once (its full resync is
   written as the differences: keys migrated to it already are equal), and slot migrations
   between the links move keys without events (moonish.redis.cluster.handoff).

7. **Replicas.** With ``prefer_replica`` each link reads its master's stream from the
   master's in-sync replica with the greatest replication offset (the master when it has
   none): the same bytes at the same offsets, so positions, ``PSYNC`` and the barriers do not
   change; the masters' own load is the side connections' ``INFO``. After a lost link the
   replica is tried once, then the master; a link on a replica that was promoted stays on it.

8. **Atomic slot migration** (Valkey 9 ``CLUSTER MIGRATESLOTS``): a link whose stream
   carries an import leaves it at its first ``CLUSTER SYNCSLOTS`` marker and reads its node
   again by a full resync once the migration has ended (moonish.redis.cluster.atomic).

9. **Processes.** With ``processes`` > 1 the shards are written by worker processes, each
   its share, with one applier per link over its own shards (moonish.redis.cluster.workers);
   this process keeps the connections, the order of the links' commands, the barriers and the
   topology, and acknowledges per link the smallest offset every worker has synced.

Example::

    stop = threading.Event()
    report = capture_cluster("redis://127.0.0.1:7000", "data", 4, stop=stop)
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Mapping

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import InvalidArgumentError, MoonishError, UnavailableError
from moonish.log.writer import DEFAULT_SEGMENT_BYTES, FsyncPolicy, WriterOptions
from moonish.redis.capture.apply import GATHER_BYTES, ShardApplier
from moonish.redis.capture.source import holds
from moonish.redis.capture.status import CaptureOptions, CaptureReport
from moonish.redis.capture.workers import remove_spools, start_workers
from moonish.redis.cluster.handoff import Handoffs
from moonish.redis.cluster.links import Link, LinkApplier, LinkReport, LinkTable, slot_set
from moonish.redis.cluster.session import ClusterSession, OnEvent, Progress
from moonish.redis.cluster.worker import serve_links
from moonish.redis.cluster.workers import LinkWorkers, WorkerHandoffs, WorkerLink
from moonish.redis.replication.messages import ReplicaOptions, parse_redis_url
from moonish.redis.replication.probe import MasterProbe
from moonish.redis.routing.filterfile import FilterFile
from moonish.redis.routing.shards import source_shards
from moonish.redis.routing.sources import (
    SourceMismatchError,
    decode_position,
    describe,
    load_source,
    remember_source,
)
from moonish.redis.routing.target import check_target
from moonish.redis.topology.nodes import ClusterNode, Topology
from moonish.redis.topology.probe import ClusterProbe, node_url
from moonish.slots import SLOT_COUNT as SLOTS
from moonish.state.config import StreamConfig


def capture_cluster(
    url: str,
    data_dir: str | os.PathLike[str],
    shards: int,
    *,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    options: CaptureOptions | None = None,
    clock: Clock = SYSTEM_CLOCK,
    stream: StreamConfig | None = None,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    on_recovery: Callable[[str, int, int], None] | None = None,
    on_event: OnEvent | None = None,
    accept_new_source: bool = False,
    retention: Mapping[str, int] | None = None,
    prefer_replica: bool = False,
    processes: int = 1,
) -> CaptureReport:
    """Follow every master of the Redis Cluster that the node at ``url`` belongs to, into
    ``shards`` shards under ``data_dir``, until ``stop`` is set (module docstring).

    Args:
        url: a cluster node's ``redis[s]://[[user]:password@]host[:port]`` (any node: the
            seed the topology is read from; the credentials and TLS files serve every node).
        data_dir: the moonish data directory (created if missing); ``source.json`` kind
            ``cluster``, location the seed's ``host:port`` (another seed of the same cluster
            continues it: the links decide).
        shards, stop, progress, options, clock, stream, segment_bytes, on_recovery,
        on_event, retention: as :func:`moonish.redis.capture.runner.capture` (events name
            their link: ``fields["link"]``, ``fields["node"]``).
        accept_new_source: go on when no stored link is continued by a master (another
            cluster; module docstring, 1).
        prefer_replica: read each master's stream from one of its replicas (module
            docstring, 7); offsets, lag and slot states are still asked of the masters.
        processes: with more than 1 (and more than 1 shard), the shards are written by up to
            this many worker processes, each its share, with one applier per link
            (moonish.redis.cluster.workers; module docstring, 9). The logs are the same as
            with one.

    Returns:
        A :class:`CaptureReport` whose offsets are the links' sums and whose ``links`` holds
        each link's state.

    Raises:
        InvalidArgumentError: a bad URL, shard count, process count or data directory, or a
            node that is not in cluster mode.
        UnavailableError: the seed cannot be read, the cluster is not ``cluster_state:ok`` or
            some slots have no master, a link stayed unreachable ``max_reconnects`` times in
            a row, or a shard's log failed.
        SourceMismatchError: the data directory follows another source, or no stored link
            is continued by a master (without ``accept_new_source``).
        And as :func:`moonish.redis.capture.runner.capture` for the streams.
    """
    out_dir = os.fspath(data_dir)
    if processes < 1:
        raise InvalidArgumentError(f"processes must be at least 1, got {processes}")
    options = options or CaptureOptions()
    replica = dataclasses.replace(options.replica, cluster_node=True)
    options = dataclasses.replace(options, replica=replica)
    seed = parse_redis_url(url)
    check_target(out_dir, shards, source=None)
    topology = read_cluster(url, replica)
    location = f"{seed.host}:{seed.port}"
    stored = load_source(out_dir)
    if stored is not None and stored["kind"] == "cluster" and stored["location"] != location:
        remember_source(out_dir, "cluster", location)  # another seed: the links decide
    log = WriterOptions(
        segment_bytes=segment_bytes, fsync=FsyncPolicy.NEVER, write_buffer_bytes=GATHER_BYTES
    )

    def recovering(shard_dir: str, lsn: int, last_lsn: int) -> None:
        if stop is not None and stop.is_set():
            raise _Stopped
        if on_recovery is not None:
            on_recovery(shard_dir, lsn, last_lsn)

    report = CaptureReport(per_shard=[0] * shards)
    report.master = f"cluster {seed.path}"
    if options.key_filter.types is not None:  # it asks the keyspaces which keys they hold
        processes = 1
    processes = min(processes, shards)

    def follow(
        table: LinkTable, applier: MakeApplier, handoffs: Handoffs, filter_file: FilterFile
    ) -> None:
        """Give each master its link and run the session until ``stop``."""

        def make_link(link_id: str, master: ClusterNode, reader: ClusterNode) -> Link:
            made = applier(link_id, slot_set(master))
            made.start(table.resume_point(link_id))
            report = LinkReport.of(link_id, master, reader)
            return Link(node_url(url, reader), made, report, node_url(url, master))

        matched = match_links(topology, table, url, replica, accept_new_source)
        links = [
            make_link(link_id, master, topology.reader_of(master, prefer_replica))
            for link_id, master in matched
        ]
        seeds = list(dict.fromkeys([url, *(node_url(url, node) for node in topology.nodes)]))
        session = ClusterSession(out_dir, links, report, options, clock, seeds, handoffs=handoffs)
        session.on_event, session.filter_file = on_event, filter_file
        session.make_link = lambda master, reader: make_link(master.node_id, master, reader)
        session.prefer_replica = prefer_replica
        session.run(stop or threading.Event(), progress)

    try:
        with source_shards(
            out_dir,
            shards,
            "cluster",
            location,
            log,
            stream or StreamConfig(),
            clock,
            options.snapshots,
            recovering,
            rebuild=processes == 1,  # else the workers rebuild the keyspaces
            key_filter=options.key_filter,
            retention=retention,
        ) as opened:
            assert opened.filter is not None
            remove_spools(out_dir)  # (the shards are ours: no capture reads them)
            if processes == 1:
                writers = opened.writers
                table = LinkTable(writers)
                key_filter = opened.filter.key_filter
                report.resumed_from = [
                    describe(decode_position(writer.source, writer.shard_dir)) for writer in writers
                ]

                def local(link_id: str, slots: frozenset[int]) -> LinkApplier:
                    return ShardApplier(
                        writers,
                        None,
                        options,
                        clock,
                        key_filter=key_filter,
                        link=link_id,
                        restamp=table.restamp(link_id),
                        slots=slots,
                    )

                follow(table, local, Handoffs(writers), opened.filter)
                return report
            for writer in opened.writers:  # the workers open them again
                writer.close()
            with start_workers(
                out_dir,
                shards,
                processes,
                log,
                stream or StreamConfig(),
                options,
                clock,
                serve_links,
            ) as started:
                positions = started.positions(stop)
                if positions is None:
                    raise _Stopped
                workers = LinkWorkers(started, out_dir)
                report.resumed_from = [describe(position) for position in positions]

                def remote(link_id: str, slots: frozenset[int]) -> LinkApplier:
                    return WorkerLink(workers, link_id, slots)

                follow(LinkTable.of(positions), remote, WorkerHandoffs(workers), opened.filter)
    except _Stopped:  # while the shards were opened: nothing connected, nothing written
        pass
    return report


MakeApplier = Callable[[str, frozenset[int]], LinkApplier]
"""A link's applier, from its id and its node's slots."""


class _Stopped(Exception):
    """``stop`` was set while the shards' writers rebuilt their keyspaces."""


def read_cluster(url: str, options: ReplicaOptions) -> Topology:
    """The cluster's topology as the seed at ``url`` sees it, every slot served.

    Raises:
        InvalidArgumentError: the node is not in cluster mode.
        UnavailableError: it cannot be read, or the cluster is not whole.
    """
    with ClusterProbe(url, options) as probe:
        if not probe.cluster_enabled():
            raise InvalidArgumentError(
                "this node is not in cluster mode (INFO cluster: cluster_enabled:0): follow "
                "it with moonish.redis.capture.runner.capture",
                path=probe.path,
            )
        topology = probe.topology(states=False)
        path = probe.path
    uncovered = topology.uncovered()
    if topology.state != "ok" or uncovered:
        slots = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in uncovered[:10])
        raise UnavailableError(
            f"the cluster is not whole (cluster_state:{topology.state}"
            + (f"; slots without a master: {slots}" if slots else "")
            + "); a capture starts once every slot is served",
            path=path,
        )
    return topology


def match_links(
    topology: Topology,
    table: LinkTable,
    url: str,
    options: ReplicaOptions,
    accept_new_source: bool,
) -> list[tuple[str, ClusterNode]]:
    """Each master with the id of the link it continues (module docstring, 1).

    Raises:
        SourceMismatchError: a stored link no master continues (without
            ``accept_new_source``).
        UnavailableError: a master could not be asked for its replication history.
    """
    stored = set(table.links())
    matched: list[tuple[str, ClusterNode]] = []
    taken: set[str] = set()
    masters = topology.linkable()
    for master in masters:
        if master.node_id in stored:
            matched.append((master.node_id, master))
            taken.add(master.node_id)
    for master in masters:
        if any(node is master for _, node in matched):
            continue
        link_id = _by_history(master, stored - taken, table, url, options) or master.node_id
        matched.append((link_id, master))
        taken.add(link_id)
    left = sorted(stored - taken)
    if left and not stored & taken and not accept_new_source:
        names = ", ".join(left)
        raise SourceMismatchError(
            f"no master of this cluster continues any stored link ({names}: their node ids, "
            "and no master's replication history holds their positions): another cluster; "
            "use a new data directory, or accept_new_source (--accept-new-source) to follow "
            "this one anyway (each master's full resync written as the differences)",
            path=url_path(url),
        )
    return sorted(matched, key=lambda pair: pair[1].slots[0] if pair[1].slots else (SLOTS, 0))


def _by_history(
    master: ClusterNode, candidates: set[str], table: LinkTable, url: str, options: ReplicaOptions
) -> str | None:
    """The stored link among ``candidates`` whose position ``master``'s history holds."""
    if not candidates:
        return None
    try:
        with MasterProbe(node_url(url, master), options) as probe:
            stream = probe.ask()
    except MoonishError as exc:
        raise UnavailableError(
            f"cannot ask {master.address} for its replication history: {exc}", path=url_path(url)
        ) from None
    for link in sorted(candidates):
        point = table.resume_point(link)
        if point.replid and holds(stream, (point.replid, point.applied)):
            return link
    return None


def url_path(url: str) -> str:
    return parse_redis_url(url).path


__all__ = ["capture_cluster", "read_cluster"]
