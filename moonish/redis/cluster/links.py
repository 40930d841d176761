"""The positions of a cluster capture's links in the shards they share, and each link's
status.

Every shard stores, on the last record of every append, the position of every link
(moonish.redis.routing.sources: ``{"links": {<link id>: {"replid", "offset", "db"}}}``). The
links are applied by one thread, one command at a time, so when a record of link A is
appended to a shard, every command of link B up to B's entry in that shard is in the shard's
log before it: a crash that cuts the log anywhere leaves a last record whose entries hold for
every link. Each shard's entries are kept here, in memory, and changed only by that shard's
appends (:meth:`LinkTable.restamp`): a link still catching up after a restart never lowers
another shard's entry for it.

A link's id is the node id of the master it first followed (``CLUSTER NODES``); a restart
resumes each link at the smallest offset its entries hold over the shards, and shards whose
entry is past a command skip it (moonish.redis.capture.apply ``resume_point``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

import orjson

from moonish.errors import CorruptionError
from moonish.redis.capture.apply import ApplierCounts, ResumePoint, resume_point
from moonish.redis.capture.behind import MasterWatch
from moonish.redis.capture.status import CONNECTED, RECONNECTING, CaptureReport
from moonish.redis.cluster.atomic import ImportWait
from moonish.redis.replication.connection import ReplicaConnection
from moonish.redis.replication.resp import ReplCommand
from moonish.redis.routing.sources import decode_position, encode_position
from moonish.redis.topology.nodes import ClusterNode
from moonish.state.shard import ShardWriter

WAITING_FOR_FAILOVER = "waiting_for_failover"
"""A link's state while the master of its slots is failed and no replica has taken over."""
WAITING_FOR_SLOT_MIGRATION = "waiting_for_slot_migration"
"""A link that left its stream at an atomic slot migration into its node, until the migration
has ended and it reads the node again (moonish.redis.cluster.atomic)."""
RETIRED = "retired"
"""A link whose node serves no slot any more (or whose slots another link's node serves) and
was lost: not reconnected."""


class LinkTable:
    """Per shard, every link's stored position (read from the shards as they open).

    Each shard's entries are kept as the bytes its last append stored for each link
    (``orjson.Fragment``), so an append writes them without decoding or encoding the other
    links' positions; :meth:`resume_point` decodes them.

    Raises:
        CorruptionError: a shard stores a single master's position, or not a position.
    """

    def __init__(self, writers: list[ShardWriter]) -> None:
        self.writers = writers
        self.entries: list[dict[str, bytes]] = []
        """Per shard: link id -> its stored position, encoded."""
        self._fragments: list[dict[str, orjson.Fragment]] = []
        positions = []
        for writer in writers:
            position = decode_position(writer.source, writer.shard_dir)
            if position and "links" not in position:
                raise CorruptionError(
                    f"the shard stores a single source's position, not a cluster capture's: "
                    f"{writer.source[:80]!r}",
                    path=writer.shard_dir,
                )
            positions.append(position)
        self._keep(positions)

    @classmethod
    def of(cls, positions: list[dict[str, Any]]) -> LinkTable:
        """The table of every shard's decoded position (as the workers of a capture in
        several processes read them, moonish.redis.cluster.workers; checked there)."""
        table = cls([])
        table._keep(positions)
        return table

    def _keep(self, positions: list[dict[str, Any]]) -> None:
        for position in positions:
            stored = position.get("links", {})
            entries = {link: orjson.dumps(entry) for link, entry in stored.items()}
            self.entries.append(entries)
            self._fragments.append({link: orjson.Fragment(data) for link, data in entries.items()})

    def links(self) -> list[str]:
        """Every link id some shard stores, sorted."""
        return sorted({link for entries in self.entries for link in entries})

    def resume_point(self, link: str) -> ResumePoint:
        """Where ``link``'s stream stands over the shards (``replid`` ``""``: some shard holds
        no position of it, or they name different histories: a full resync)."""
        return resume_point(
            [orjson.loads(entries[link]) if link in entries else {} for entries in self.entries]
        )

    def restamp(self, link: str) -> Callable[[int, bytes], bytes]:
        """For ``link``'s router (``Router.restamp``): its position ``{"replid", "offset",
        "db"}`` in a shard becomes the shard's entry for it, and the shard stores them all."""
        entries, fragments = self.entries, self._fragments

        def restamp(shard: int, source: bytes) -> bytes:
            entries[shard][link] = source
            mine = fragments[shard]
            mine[link] = orjson.Fragment(source)
            return encode_position({"links": mine})

        return restamp


@dataclass
class LinkReport:
    """One link's state (``capture.json`` ``links``, ``moonish cdc info``).

    Attributes:
        link: the link's id (the node id of the master it first followed).
        node: the id of the master it follows now (whose slots it carries).
        address: that master's ``host:port``.
        read_from: the ``host:port`` the stream is read from: ``address``, or one of the
            master's replicas (``prefer_replica``).
        role: that node's role, ``master`` or ``replica``.
        slots: the hash slots the master serves, ``[[first, last], ...]``.
        replid, received_offset, durable_offset: as a single capture's (its own stream).
        master_offset, bytes_behind, seconds_behind, master_error: the node's
            ``master_repl_offset`` and how far ``durable_offset`` is behind it.
        state: ``connecting``, ``connected``, ``reconnecting``, ``waiting_for_failover``,
            ``waiting_for_slot_migration``, ``retired`` or ``stopped``.
        full_resyncs, partial_resyncs: ``+FULLRESYNC`` and ``+CONTINUE`` answers.
        reconnects, last_error: connections lost, and the last reason.
    """

    link: str
    node: str
    address: str
    slots: list[list[int]]
    read_from: str = ""
    role: str = "master"
    replid: str = ""
    received_offset: int = 0
    durable_offset: int = 0
    master_offset: int | None = None
    bytes_behind: int | None = None
    seconds_behind: float | None = None
    master_error: str | None = None
    state: str = "connecting"
    full_resyncs: int = 0
    partial_resyncs: int = 0
    reconnects: int = 0
    last_error: str | None = None

    @classmethod
    def of(cls, link: str, node: ClusterNode, reader: ClusterNode | None = None) -> LinkReport:
        """The report of a link that follows ``node`` (a master), read from ``reader``
        (default: the master itself)."""
        slots = [[first, last] for first, last in node.slots]
        reader = reader or node
        return cls(link, node.node_id, node.address, slots, reader.address, reader.role)

    def to_json(self) -> dict[str, object]:
        return {
            "link": self.link,
            "node": self.node,
            "address": self.address,
            "read_from": self.read_from,
            "role": self.role,
            "slots": self.slots,
            "replid": self.replid,
            "received_offset": self.received_offset,
            "durable_offset": self.durable_offset,
            "master_offset": self.master_offset,
            "bytes_behind": self.bytes_behind,
            "seconds_behind": (
                None if self.seconds_behind is None else round(self.seconds_behind, 3)
            ),
            "master_error": self.master_error,
            "state": self.state,
            "full_resyncs": self.full_resyncs,
            "partial_resyncs": self.partial_resyncs,
            "reconnects": self.reconnects,
            "last_error": self.last_error,
        }


class LinkApplier(Protocol):
    """What a cluster session asks of a link's applier: a
    :class:`~moonish.redis.capture.apply.ShardApplier` over every shard (one process), or
    the workers that own the shards (moonish.redis.cluster.workers ``WorkerLink``). Offsets
    are the link's stream's; ``slots`` the hash slots its node serves."""

    replid: str
    slots: Container[int] | None

    @property
    def applied(self) -> int: ...

    @property
    def durable(self) -> int: ...

    @property
    def counts(self) -> ApplierCounts: ...

    def start(self, point: ResumePoint) -> None: ...

    def full_resync(
        self,
        replid: str,
        offset: int,
        payload: BinaryIO,
        path: str,
        snapshot_first: bool = True,
        snapshot_last: bool = True,
    ) -> None: ...

    def continued(self, replid: str, previous_replid: str | None) -> None: ...

    def apply_batch(self, batch: list[ReplCommand], path: str) -> None: ...

    def tick(self) -> bool: ...

    def disconnected(self) -> None: ...

    def finish(self) -> None: ...


@dataclass
class Link:
    """One master's replication link: where its stream is read (``url``: the master, or one
    of its replicas), the master (``master_url``: its offsets, its migrating slots), its
    applier and its state."""

    url: str
    applier: LinkApplier
    report: LinkReport
    master_url: str = ""
    connection: ReplicaConnection | None = None
    reader: threading.Thread | None = None
    watch: MasterWatch | None = None
    retry_at_us: int = 0
    backoff_ms: int = 0
    failures: int = 0
    reading: threading.Event = field(default_factory=threading.Event)
    import_wait: ImportWait | None = None
    """Set while the link waits out an atomic slot migration into its node; its next sync
    is a full resync."""

    def __post_init__(self) -> None:
        self.master_url = self.master_url or self.url

    @property
    def link_id(self) -> str:
        return self.report.link

    @property
    def received(self) -> int:
        """The end offset of the last command received (applied or pending)."""
        return self.report.received_offset

    @property
    def applied(self) -> int:
        return self.applier.applied

    @property
    def connected(self) -> bool:
        return self.connection is not None


def slot_set(node: ClusterNode) -> frozenset[int]:
    """The hash slots ``node`` serves."""
    return frozenset(slot for first, last in node.slots for slot in range(first, last + 1))


def measure(report: CaptureReport, links: list[Link], now_us: int) -> None:
    """Each link's figures against its node (its side connection's last answer), and the
    capture's: offsets and bytes behind summed, seconds behind the largest (``None`` when a
    link's is unknown), ``link`` ``connected`` only when every link is; retired links left
    out of all of them."""
    total: int | None = 0
    seconds: float | None = 0.0
    live = [link for link in links if link.report.state != RETIRED]
    for link in live:
        each = link.report
        if link.watch is None:
            total = seconds = None
            continue
        lag = link.watch.behind.measure(each.replid, each.durable_offset, now_us)
        each.master_offset, each.bytes_behind = lag.master_offset, lag.bytes_behind
        each.seconds_behind, each.master_error = lag.seconds_behind, lag.error
        total = None if total is None or lag.bytes_behind is None else total + lag.bytes_behind
        if seconds is not None and lag.seconds_behind is not None:
            seconds = max(seconds, lag.seconds_behind)
        else:
            seconds = None
    report.bytes_behind, report.seconds_behind = total, seconds
    report.link = (
        CONNECTED if all(link.report.state == CONNECTED for link in live) else RECONNECTING
    )
    report.received_offset = sum(link.report.received_offset for link in live)
    report.durable_offset = sum(link.report.durable_offset for link in live)
    report.links = [link.report.to_json() for link in links]
