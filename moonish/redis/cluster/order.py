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
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from moonish.clock import Clock
from moonish.errors import MoonishError
from moonish.redis.cluster.atomic import is_slot_migration
from moonish.redis.cluster.functions import FUNCTION, reconcile
from moonish.redis.cluster.handoff import (
    APPLIED,
    DELETES,
    NO_CHANGE,
    RECEIVED,
    RESTORE_ASKING,
    Handoffs,
    barrier_of,
)
from moonish.redis.replication.messages import ReplicaOptions
from moonish.redis.replication.probe import MasterProbe
from moonish.redis.replication.resp import ReplCommand
from moonish.redis.topology.nodes import Topology, parse_cluster_nodes
from moonish.redis.topology.probe import node_url
from moonish.slots import hash_slot

APPLIED_BARRIER_MAX_MS = 5_000
EXISTS_AHEAD = 1_000
"""Keys of a link's pending deletes asked ``EXISTS`` in one pipeline."""
PAIRED_PER_READY = 2_000
ORDERED = frozenset({b"CLUSTER", FUNCTION, RESTORE_ASKING, *DELETES})
"""The commands :meth:`Order.ready` looks at (the markers, functions and barriers); every
other command of a link is applied in its stream's order as it comes."""
"""Commands through the pairing per :meth:`Order.ready` call: a long run of deletes (the
trim of a migrated slot) is applied in chunks, between which the other links are served."""


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
    """What a link's next command waits for: per other link, an offset to reach, asked when
    the link had received up to ``mark`` (an offset of its own stream)."""

    def __init__(self, kind: str, offsets: dict[str, int], since_us: int, mark: int) -> None:
        self.kind, self.offsets, self.since_us, self.mark = kind, offsets, since_us, mark


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
        self.passed: dict[str, Barrier] = {}
        """Per link, the last barrier it passed with every offset reached: a later command
        received before that barrier was asked (``end_offset`` up to its ``mark``) passes
        it too, as the offsets were asked after that command arrived."""
        self._nodes: dict[str, MasterProbe] = {}  # side connections asked EXISTS, by URL
        self._seen: dict[str, View] = {}  # a link node's CLUSTER NODES, per ready()
        self._exists: dict[tuple[str, bytes], bool] = {}  # EXISTS answers, per ready()
        self._probes: dict[str, tuple[str, MasterProbe]] = {}
        self.on_note: Callable[[Stream, str], None] | None = None
        """Told of a ``FUNCTION LOAD`` that replaced another node's library."""
        self.slot_imports: list[Stream] = []
        """Links whose next command is an atomic slot migration's ``CLUSTER SYNCSLOTS``
        marker (moonish.redis.cluster.atomic): the session takes them off their stream."""

    def add(self, link: Stream) -> None:
        """A link added while the capture runs (already in ``links``)."""
        self.pending[link.link_id] = deque()

    def received(self, link: Stream, batch: Sequence[ReplCommand]) -> None:
        """Queue a link's batch behind what it has pending."""
        self.pending[link.link_id].extend(batch)
        for command in batch:
            argv = command.argv
            if argv[0].upper() == RESTORE_ASKING:
                self.handoffs.received(link.link_id, argv)

    def drop(self, link: Stream) -> None:
        """Forget what ``link`` has pending (its connection was lost: PSYNC asks again)."""
        for command in self.pending[link.link_id]:
            if command.argv[0].upper() == RESTORE_ASKING and len(command.argv) > 1:
                waiting = self.handoffs.waiting.get(link.link_id)
                if waiting is not None and waiting[command.argv[1]] > 0:
                    waiting[command.argv[1]] -= 1
        self.pending[link.link_id].clear()
        self.barriers.pop(link.link_id, None)
        self.passed.pop(link.link_id, None)
        if link in self.slot_imports:
            self.slot_imports.remove(link)

    def has_pending(self) -> bool:
        return any(self.pending.values())

    def ready(self, link: Stream) -> list[ReplCommand]:
        """The commands of ``link`` that may be applied now, in order (the commands that pass a
        barrier rewritten by the pairing); empty when its next command waits."""
        pending = self.pending[link.link_id]
        chunk: list[ReplCommand] = []
        several = len(self.links) > 1
        self._seen.pop(link.link_id, None)  # read once for the commands received by now
        self._exists.clear()
        paired = 0
        while pending:
            command = pending[0]
            if command.argv[0].upper() not in ORDERED:  # most commands: applied as they come
                chunk.append(pending.popleft())
                continue
            if is_slot_migration(command.argv):
                if not chunk and link not in self.slot_imports:
                    self.slot_imports.append(link)
                break
            if several and command.argv[0].upper() == FUNCTION:
                if not chunk:  # alone in its chunk: decided after all before it applied
                    pending.popleft()
                    chunk.append(self._function(link, command))
                break
            kind = barrier_of(command.argv) if several else None
            if kind is not None:
                if paired >= PAIRED_PER_READY or not self._passed(link, kind, command):
                    break
                command = self._paired(link, command)
                paired += 1
            pending.popleft()
            chunk.append(command)
        return chunk

    def _function(self, link: Stream, command: ReplCommand) -> ReplCommand:
        """A ``FUNCTION`` command made to do on moonish's libraries what it did on its node
        (moonish.redis.cluster.functions); a library two nodes hold with different code is
        told to :attr:`on_note`."""
        argv, replaced = reconcile(command.argv, self.handoffs.libraries())
        if argv:
            self.handoffs.functions(argv)
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

    def _passed(self, link: Stream, kind: str, command: ReplCommand) -> bool:
        """Whether ``link`` may apply its next command (which needs a ``kind`` barrier)."""
        done = self.passed.get(link.link_id)
        if (
            done is not None
            and command.end_offset <= done.mark
            and (done.kind == kind or done.kind == APPLIED)  # applied implies received
        ):
            return True
        barrier = self.barriers.get(link.link_id)
        now = self.clock.now_us()
        if barrier is None:
            offsets = self.offsets_now(link)
            barrier = Barrier(kind, offsets, now, link.received)
            self.barriers[link.link_id] = barrier
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
                    self.passed.pop(link.link_id, None)
                    del self.barriers[link.link_id]
                    return True
                return False
        self.passed[link.link_id] = self.barriers.pop(link.link_id)
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
        .cluster.handoff): the node that serves (or imports) its slot holds it. The link's
        node's ``CLUSTER NODES`` is read once per :meth:`ready`, on the first key that needs
        it, and ``EXISTS`` is asked at once for the keys of up to :data:`EXISTS_AHEAD` of the
        link's pending deletes (every one received before the answers were asked)."""

        def moved(key: bytes) -> bool:
            view = self._node_view(link)
            if view is None:
                return True  # cannot tell: keep the key rather than lose a moved one
            url = _holder(view, link.master_url, key)
            if url is None:
                return False
            if (url, key) not in self._exists:
                self._ask_exists(link, view)
            found = self._exists.get((url, key))
            if found is None:
                self.handoffs.counts["unclassified_deletes"] += 1
                return True
            return found

        return moved

    def _node_view(self, link: Stream) -> View | None:
        """``link``'s node's ``CLUSTER NODES`` and slot table, read once per :meth:`ready`
        (``None``: it could not be read, counted as ``unclassified_deletes``)."""
        view = self._seen.get(link.link_id)
        if view is None:
            try:
                text = self.probe(link).command(b"CLUSTER", b"NODES")
                topology = parse_cluster_nodes(_text(text), link.master_url)
            except MoonishError:
                self.handoffs.counts["unclassified_deletes"] += 1
                return None
            view = self._seen[link.link_id] = View(topology, topology.slot_table())
        return view

    def _ask_exists(self, link: Stream, view: View) -> None:
        """Ask each node that holds a key of ``link``'s pending deletes (up to
        :data:`EXISTS_AHEAD` keys) whether it has them, one pipeline per node."""
        asked: dict[str, list[bytes]] = {}
        count = 0
        for command in self.pending[link.link_id]:
            if count >= EXISTS_AHEAD:
                break
            if barrier_of(command.argv) != RECEIVED:
                continue
            for key in command.argv[1:]:
                url = _holder(view, link.master_url, key)
                if url is not None and (url, key) not in self._exists:
                    asked.setdefault(url, []).append(key)
                    count += 1
        for url, keys in asked.items():
            probe = self._nodes.get(url)
            if probe is None:
                probe = self._nodes[url] = MasterProbe(url, self.options, 2_000)
            try:
                replies = probe.pipeline([(b"EXISTS", key) for key in keys])
            except MoonishError:
                continue  # unknown: counted as each key is asked
            for key, reply in zip(keys, replies, strict=True):
                self._exists[url, key] = reply == 1

    def offsets_now(self, link: Stream) -> dict[str, int]:
        """Every other connected link's node's ``master_repl_offset`` now (link id ->
        offset; a node that does not answer is left out, counted as ``unsampled``)."""
        offsets = {}
        for other in self.links:
            if other.link_id == link.link_id or not other.connected:
                continue
            try:
                offsets[other.link_id] = self.probe(other).ask().offset
            except MoonishError:
                self.handoffs.counts["unsampled"] += 1
        return offsets

    def probe(self, link: Stream) -> MasterProbe:
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
        for probe in self._nodes.values():
            probe.close()
        self._nodes.clear()


class View(NamedTuple):
    """A node's ``CLUSTER NODES`` and the slot table it gives."""

    topology: Topology
    table: list[str | None]


def _holder(view: View, seen_by: str, key: bytes) -> str | None:
    """The URL of the node that serves (or imports) ``key``'s slot, when that is not the
    node whose view it is (``None``: still served there, or no such node)."""
    topology = view.topology
    mine = topology.node(topology.seen_by)
    if mine is None:
        return None
    slot = hash_slot(key)
    target = mine.migrating.get(slot)
    if target is None:
        if any(first <= slot <= last for first, last in mine.slots):
            return None  # still served here: a real delete
        target = view.table[slot]
    node = None if target is None else topology.node(target)
    return None if node is None else node_url(seen_by, node)


def _text(reply: object) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
