"""The order in which a cluster capture applies its links' commands: each link's commands in
its stream's order, the links' interleaved as they arrive, except where a slot migration needs
a barrier (moonish.redis.cluster.handoff): a link whose next command is a ``RESTORE-ASKING``
waits until every other link has applied what its node had written when the command arrived,
and one whose next command is a ``DEL``/``UNLINK`` until every other link has received as
much. The other offsets are asked of the nodes (``INFO replication``) on side connections, at
most once per barrier; a barrier on applied offsets gives up after
:data:`APPLIED_BARRIER_MAX_MS` (two nodes migrating keys to each other at once could otherwise
wait on each other), counted as ``barrier_timeouts``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from moonish.clock import Clock
from moonish.errors import MoonishError
from moonish.redis.cluster.functions import FUNCTION, reconcile
from moonish.redis.cluster.handoff import APPLIED, NO_CHANGE, RESTORE_ASKING, Handoffs, barrier_of
from moonish.redis.replication.messages import ReplicaOptions
from moonish.redis.replication.probe import MasterProbe
from moonish.redis.replication.resp import ReplCommand
from moonish.redis.topology.nodes import Topology, parse_cluster_nodes
from moonish.redis.topology.probe import node_url
from moonish.slots import hash_slot

APPLIED_BARRIER_MAX_MS = 5_000


class Stream(Protocol):
    """What the order needs of a link (moonish.redis.cluster.links ``Link``): its master's
    URL (``master_url``) is where offsets and slot states are asked."""

    master_url: str

    @property
    def link_id(self) -> str: ...

    @property
    def received(self) -> int: ...

    @property
    def applied(self) -> int: ...

    @property
    def connected(self) -> bool: ...


class Barrier:
    """What a link's next command waits for: per other link, an offset to reach."""

    def __init__(self, kind: str, offsets: dict[str, int], since_us: int) -> None:
        self.kind, self.offsets, self.since_us = kind, offsets, since_us


class Order:
    """The links' received commands not yet applied, and the barriers.

    Args:
        links: every link (:class:`Stream`); the caller's list, which may grow.
        handoffs: the pairing of migrations (its ``counts`` also get ``barrier_timeouts``
            and ``unsampled``).
        options: for the side connections that ask the nodes' offsets.
        clock: barrier times.
    """

    def __init__(
        self, links: Sequence[Stream], handoffs: Handoffs, options: ReplicaOptions, clock: Clock
    ) -> None:
        self.links, self.handoffs, self.options, self.clock = links, handoffs, options, clock
        self.pending: dict[str, deque[ReplCommand]] = {link.link_id: deque() for link in links}
        self.barriers: dict[str, Barrier] = {}
        self._probes: dict[str, tuple[str, MasterProbe]] = {}
        self.on_note: Callable[[Stream, str], None] | None = None
        """Told of a ``FUNCTION LOAD`` that replaced another node's library."""

    def add(self, link: Stream) -> None:
        """A link added while the capture runs (already in ``links``)."""
        self.pending[link.link_id] = deque()

    def received(self, link: Stream, batch: Iterable[ReplCommand]) -> None:
        """Queue a link's batch behind what it has pending."""
        pending = self.pending[link.link_id]
        for command in batch:
            self.handoffs.received(link.link_id, command.argv)
            pending.append(command)

    def drop(self, link: Stream) -> None:
        """Forget what ``link`` has pending (its connection was lost: PSYNC asks again)."""
        for command in self.pending[link.link_id]:
            if command.argv[0].upper() == RESTORE_ASKING and len(command.argv) > 1:
                waiting = self.handoffs.waiting.get(link.link_id)
                if waiting is not None and waiting[command.argv[1]] > 0:
                    waiting[command.argv[1]] -= 1
        self.pending[link.link_id].clear()
        self.barriers.pop(link.link_id, None)

    def has_pending(self) -> bool:
        return any(self.pending.values())

    def ready(self, link: Stream) -> list[ReplCommand]:
        """The commands of ``link`` that may be applied now, in order (the commands that pass a
        barrier rewritten by the pairing); empty when its next command waits."""
        pending = self.pending[link.link_id]
        chunk: list[ReplCommand] = []
        several = len(self.links) > 1
        while pending:
            command = pending[0]
            if several and command.argv[0].upper() == FUNCTION:
                if not chunk:  # alone in its chunk: decided after all before it applied
                    pending.popleft()
                    chunk.append(self._function(link, command))
                break
            kind = barrier_of(command.argv) if several else None
            if kind is not None:
                if not self._passed(link, kind):
                    break
                command = self._paired(link, command)
            pending.popleft()
            chunk.append(command)
        return chunk

    def _function(self, link: Stream, command: ReplCommand) -> ReplCommand:
        """A ``FUNCTION`` command made to do on moonish's libraries what it did on its node
        (moonish.redis.cluster.functions); a library two nodes hold with different code is
        told to :attr:`on_note`."""
        libraries = self.handoffs.writers[0].libraries
        argv, replaced = reconcile(command.argv, libraries)
        if replaced is not None and self.on_note is not None:
            name = replaced.decode(errors="replace")
            self.on_note(
                link,
                f"FUNCTION LOAD of a library another node holds with other code: {name} "
                "replaced with this node's (moonish holds one set of libraries per cluster)",
            )
        if argv is command.argv:
            return command
        return ReplCommand(command.start_offset, command.end_offset, argv or NO_CHANGE)

    def _passed(self, link: Stream, kind: str) -> bool:
        """Whether ``link`` may apply its next command (which needs a ``kind`` barrier)."""
        barrier = self.barriers.get(link.link_id)
        now = self.clock.now_us()
        if barrier is None:
            barrier = self.barriers[link.link_id] = Barrier(kind, self.offsets_now(link), now)
        others = {other.link_id: other for other in self.links}
        for link_id, offset in barrier.offsets.items():
            other = others[link_id]
            reached = other.applied if barrier.kind == APPLIED else other.received
            if reached < offset and other.connected:
                if (
                    barrier.kind == APPLIED
                    and now - barrier.since_us > APPLIED_BARRIER_MAX_MS * 1000
                ):
                    self.handoffs.counts["barrier_timeouts"] += 1
                    break
                return False
        del self.barriers[link.link_id]
        return True

    def _paired(self, link: Stream, command: ReplCommand) -> ReplCommand:
        argv = command.argv
        if argv[0].upper() == RESTORE_ASKING:
            new = self.handoffs.restore(link.link_id, argv) if len(argv) > 1 else argv
        else:
            new = self.handoffs.delete(link.link_id, argv, self._mover(link))
        if new is argv:
            return command
        return ReplCommand(command.start_offset, command.end_offset, new if new else NO_CHANGE)

    def _mover(self, link: Stream) -> Callable[[bytes], bool]:
        """For a ``DEL`` of ``link``: whether a key moved to another node (moonish.redis
        .cluster.handoff). The node's own ``CLUSTER NODES`` is read once per command, on the
        first key that needs it."""
        seen: list[Topology] = []

        def moved(key: bytes) -> bool:
            if not seen:
                try:
                    text = self._probe(link).command(b"CLUSTER", b"NODES")
                    seen.append(parse_cluster_nodes(_text(text), link.master_url))
                except MoonishError:
                    self.handoffs.counts["unclassified_deletes"] += 1
                    return True  # cannot tell: keep the key rather than lose a moved one
            topology = seen[0]
            mine = topology.node(topology.seen_by)
            slot = hash_slot(key)
            if mine is None:
                return False
            target = mine.migrating.get(slot)
            if target is None:
                if any(first <= slot <= last for first, last in mine.slots):
                    return False  # still served here: a real delete
                target = topology.slot_table()[slot]
            node = None if target is None else topology.node(target)
            if node is None:
                return False
            try:
                with MasterProbe(node_url(link.master_url, node), self.options, 2_000) as probe:
                    return probe.command(b"EXISTS", key) == 1
            except MoonishError:
                self.handoffs.counts["unclassified_deletes"] += 1
                return True

        return moved

    def offsets_now(self, link: Stream) -> dict[str, int]:
        """Every other connected link's node's ``master_repl_offset`` now (link id ->
        offset; a node that does not answer is left out, counted as ``unsampled``)."""
        offsets = {}
        for other in self.links:
            if other.link_id == link.link_id or not other.connected:
                continue
            try:
                offsets[other.link_id] = self._probe(other).ask().offset
            except MoonishError:
                self.handoffs.counts["unsampled"] += 1
        return offsets

    def _probe(self, link: Stream) -> MasterProbe:
        """The side connection to ``link``'s node (another after a failover)."""
        known = self._probes.get(link.link_id)
        if known is not None and known[0] == link.master_url:
            return known[1]
        if known is not None:
            known[1].close()
        probe = MasterProbe(link.master_url, self.options, timeout_ms=2_000)
        self._probes[link.link_id] = (link.master_url, probe)
        return probe

    def close(self) -> None:
        for _, probe in self._probes.values():
            probe.close()
        self._probes.clear()


def _text(reply: object) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
