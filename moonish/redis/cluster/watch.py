"""Following a running cluster's topology (moonish.redis.cluster.session): which node
serves a link's slots after a failover, each node's slots after a migration, masters added,
links retired and resumed, which node a link reads from (``prefer_replica``), and a link's
wait through an atomic slot migration into its node (moonish.redis.cluster.atomic).

The topology is asked of the capture's seeds in order (every node seen at the start, and
every node seen since) until one answers, on side connections (moonish.redis.topology.probe).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from moonish.clock import Clock
from moonish.errors import MoonishError
from moonish.redis.capture.status import RECONNECTING, CaptureEvent, CaptureOptions, source_event
from moonish.redis.cluster.atomic import ATOMIC_IMPORTS, ImportWait
from moonish.redis.cluster.handoff import Handoffs
from moonish.redis.cluster.links import (
    RETIRED,
    WAITING_FOR_FAILOVER,
    WAITING_FOR_SLOT_MIGRATION,
    Link,
)
from moonish.redis.cluster.order import Order
from moonish.redis.replication.messages import ReplicaOptions
from moonish.redis.replication.probe import MasterProbe
from moonish.redis.topology.nodes import MASTER, ClusterNode, Topology, ranges
from moonish.redis.topology.probe import ClusterProbe, node_url

TOPOLOGY_INTERVAL_MS = 1_000
"""How often a running cluster capture reads the topology again."""
FAILOVER_POLL_MS = 250
"""How often a link waiting for a failover reads the topology."""
READER_WAIT_MS = 1_000
"""How long a link waits for its replica to hold what it applied."""
RETIRED_US = 2**62
"""A retired link's next connection time (µs): never."""


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


def served(topology: Topology) -> dict[str, frozenset[int]]:
    """Per master's node id, the slots it serves (:meth:`Topology.slot_table`)."""
    found: dict[str, set[int]] = {}
    for slot, owner in enumerate(topology.slot_table()):
        if owner is not None:
            found.setdefault(owner, set()).add(slot)
    return {node: frozenset(slots) for node, slots in found.items()}


class TopologyFollowing:
    """The part of :class:`~moonish.redis.cluster.session.ClusterSession` that follows the
    topology (module docstring); the session provides the attributes declared here."""

    links: list[Link]
    seeds: list[str]
    options: CaptureOptions
    clock: Clock
    order: Order
    prefer_replica: bool
    make_link: Callable[[ClusterNode, ClusterNode], Link] | None
    _topology_us: int
    handoffs: Handoffs
    _event: Callable[[Link, CaptureEvent], None]
    _try_connect: Callable[..., bool]
    _drop: Callable[[Link], None]

    def _follow_owner(self, link: Link) -> bool:
        """After a lost link: move it to the master that serves its slots now
        (moonish.redis.cluster.session, failover), read from one of its replicas with
        ``prefer_replica`` (the master once a replica failed the link twice in a row);
        whether to connect now (``False``: the slots' owner is failed and none has taken
        over: wait, as after a failed attempt)."""
        if not link.report.slots:  # its node serves nothing any more: nothing to follow
            self._retire(link)
            return False
        first_slot = link.report.slots[0][0]
        found = read_any(self.seeds, self.options.replica)
        owner_id = None if found is None else found[0].slot_table()[first_slot]
        if found is None or owner_id is None:  # no node answers: try the link's node again
            return True
        topology, seen_by = found
        owner = topology.node(owner_id)
        assert owner is not None
        report = link.report
        taken = any(
            other is not link
            and other.report.node == owner.node_id
            and other.report.state != RETIRED
            for other in self.links
        )
        if taken:  # its node gave its slots away (and turned replica): another link has them
            text = f"its slots are served by {owner.address}, which another link follows: retired"
            self._event(link, source_event(self.clock.now_us(), text, owner.address))
            self._retire(link)
            return False
        if not owner.usable:
            report.state = WAITING_FOR_FAILOVER
            link.retry_at_us = self.clock.now_us() + FAILOVER_POLL_MS * 1000
            return False
        if owner.node_id != report.node:
            text = (
                f"slot {first_slot} is served by {owner.address} ({owner.node_id[:8]}) now, not "
                f"{report.address} ({report.node[:8]}), as {seen_by} sees the cluster: "
                "following it (a failover)"
            )
            self._event(link, source_event(self.clock.now_us(), text, owner.address))
        reader = topology.reader_of(owner, self.prefer_replica and link.failures < 2)
        self._point(link, owner, reader)
        return True

    def _point(self, link: Link, master: ClusterNode, reader: ClusterNode) -> None:
        """``link`` follows ``master``, reading its stream from ``reader`` (the master or one
        of its replicas)."""
        report, seed = link.report, self.seeds[0]
        link.url = node_url(seed, reader)
        report.read_from, report.role = reader.address, reader.role
        if master.node_id != report.node or link.master_url != node_url(seed, master):
            link.master_url = node_url(seed, master)
            report.node, report.address = master.node_id, master.address
            if link.watch is not None:
                link.watch.close()
                link.watch = None

    def _reader_holds(self, link: Link) -> bool:
        """Whether the node ``link`` reads from holds every byte the link applied (a master
        does; a replica may lag, and ``PSYNC`` past its offset is a full resync): its
        ``INFO replication`` is asked until it does, up to :data:`READER_WAIT_MS`."""
        replid, applied = link.applier.replid, link.applier.applied
        if link.url == link.master_url or not replid:
            return True
        deadline = self.clock.now_us() + READER_WAIT_MS * 1000
        try:
            with MasterProbe(link.url, self.options.replica, READER_WAIT_MS) as probe:
                while True:
                    stream = probe.ask()
                    if stream.follows(replid) and stream.offset >= applied:
                        return True
                    if self.clock.now_us() >= deadline:
                        return False
                    time.sleep(0.05)
        except MoonishError:
            return False

    def _read_master(self, link: Link) -> None:
        report = link.report
        text = f"the replica {report.read_from} is behind what the link applied: reading the master"
        self._event(link, source_event(self.clock.now_us(), text, report.address))
        link.url, report.read_from, report.role = link.master_url, report.address, MASTER

    def _retire(self, link: Link) -> None:
        """``link`` is followed no more (its node serves no slot, or another link follows
        the node that serves them): no reconnects, no side connection."""
        link.report.state, link.retry_at_us = RETIRED, RETIRED_US
        if link.watch is not None:
            link.watch.close()
            link.watch = None

    def _watch_topology(self) -> None:
        """Read the topology again: each connected link's slots become its node's, and a
        master without a link gets one (a node added), connected at once, unless some link's
        node is not a usable master any more (a failover: that link moves first)."""
        self._topology_us = self.clock.now_us()
        found = read_any(self.seeds, self.options.replica)
        if found is None or found[0].state != "ok":
            return
        topology = found[0]
        owned = served(topology)
        for link in self.links:
            if link.connection is not None:
                slots = owned.get(link.report.node, frozenset())
                link.applier.slots = slots
                link.report.slots = [[a, b] for a, b in ranges(sorted(slots))]
        for node in topology.nodes:
            url = node_url(self.seeds[0], node)
            if url not in self.seeds:
                self.seeds.append(url)
        live = [link for link in self.links if link.report.state != RETIRED]
        if any(link.connection is None or not _serving(topology, link) for link in live):
            return  # a failover under way: its link moves to the promoted node first
        followed = {link.report.node for link in live}
        retired = {link.report.node: link for link in self.links if link not in live}
        for master in topology.linkable():
            if master.node_id in followed:
                continue
            if master.node_id in retired:
                again = owned.get(master.node_id)
                if again:  # slots moved back to a retired link's node
                    reader = topology.reader_of(master, self.prefer_replica)
                    self._revive(retired[master.node_id], master, reader, again)
                continue  # (an emptied master not yet turned replica, or seen late)
            if self.make_link is not None:
                link = self.make_link(master, topology.reader_of(master, self.prefer_replica))
                self.links.append(link)
                self.order.add(link)
                text = f"{master.address} ({master.node_id[:8]}) is a new master: a new link"
                self._event(link, source_event(self.clock.now_us(), text, master.address))
                self._try_connect(link, last_load=False)

    def _revive(
        self, link: Link, master: ClusterNode, reader: ClusterNode, slots: frozenset[int]
    ) -> None:
        """A retired ``link``'s node serves ``slots`` again: reconnect it (``PSYNC`` from what
        it applied; a full resync is written as the differences of those slots)."""
        link.applier.slots = slots
        link.report.slots = [[a, b] for a, b in ranges(sorted(slots))]
        self._point(link, master, reader)
        link.report.state, link.retry_at_us, link.failures = RECONNECTING, 0, 0
        text = f"{master.address} ({master.node_id[:8]}) serves slots again: its link resumes"
        self._event(link, source_event(self.clock.now_us(), text, master.address))
        self._try_connect(link, last_load=False)

    def _leave_for_import(self, link: Link) -> None:
        """``link``'s next command marks an atomic slot migration into its node
        (moonish.redis.cluster.atomic): leave the stream there, until the migration ends."""
        now = self.clock.now_us()
        text = (
            f"an atomic slot migration into {link.report.address} (CLUSTER SYNCSLOTS in its "
            "stream): its stream is left there, and read again by a full resync once the "
            "migration has ended"
        )
        self._event(link, source_event(now, text, link.report.address))
        self.handoffs.counts[ATOMIC_IMPORTS] += 1
        self._drop(link)
        link.import_wait = ImportWait()
        link.report.state = WAITING_FOR_SLOT_MIGRATION
        link.retry_at_us = now

    def _import_over(self, link: Link) -> bool:
        """Whether ``link`` may read its node again after an atomic migration: the node runs
        no import, and every other link has applied what its node had written when that was
        first seen (the source's writes to the moved slots, up to its pause). Then its slots
        become the node's now (the moved ones, after a success)."""
        wait = link.import_wait
        assert wait is not None
        if wait.offsets is None:
            if wait.import_running(self.order.probe(link)):
                link.report.last_error = wait.error
                return False
            wait.offsets = self.order.offsets_now(link)
        others = {other.link_id: other for other in self.links}
        if any(
            others[link_id].connected and others[link_id].applied < offset
            for link_id, offset in wait.offsets.items()
        ):
            return False
        found = read_any(self.seeds, self.options.replica)
        if found is not None:
            slots = served(found[0]).get(link.report.node, frozenset())
            link.applier.slots = slots
            link.report.slots = [[a, b] for a, b in ranges(sorted(slots))]
        return True


def _serving(topology: Topology, link: Link) -> bool:
    """Whether ``link``'s node is a usable master in ``topology``."""
    node = topology.node(link.report.node)
    return node is not None and node.role == MASTER and node.usable
