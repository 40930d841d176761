"""The shard side of a live capture (moonish.redis.capture.runner): applying the replication
stream to a group of shards, storing positions, syncing and marking.

A :class:`ShardApplier` writes the shards it owns, either every shard (a capture in one
process) or one group of them (a worker of a capture in several processes,
moonish.redis.capture.workers); for the shards it does not own it holds stand-ins that run
nothing (moonish.state.shadow), and commands across shards of several workers go through
their exchange (moonish.redis.routing.exchange). Every applier sees the whole stream, so every one
tracks ``SELECT``, ``MULTI``/``EXEC`` and the offsets alike, and reports the same applied
offset; each syncs its own shards and says how far they are durable.

Positions (docs/redis-source.md, "Live capture"): each command's records carry
``{"replid", "offset": <its end offset>, "db": <the db selected after it>}`` on the last one;
a shard whose stored offset is past a command skips it (a restart resumes at the smallest
stored offset); shards no command touched get a position marker every ``mark_interval_ms``.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NamedTuple

from moonish.clock import Clock
from moonish.errors import UnsupportedFormatError
from moonish.log.records import KvChange
from moonish.redis.capture.status import CaptureOptions
from moonish.redis.rdb.contents import read_contents
from moonish.redis.replication.resp import ReplCommand
from moonish.redis.routing.keyfilter import KeyFilter
from moonish.redis.routing.router import Entry, Exchange, Router, is_single, selected_db
from moonish.redis.routing.sources import encode_position, link_position
from moonish.slots import hash_slot, shard_of_key
from moonish.state.commands.execute import keys_of
from moonish.state.expiry import sweep
from moonish.state.load import (
    add_libraries,
    load_entries,
    load_order,
    loader_for,
    remove_missing,
    set_libraries,
)
from moonish.state.shard import ShardWriter
from moonish.state.spread import SpreadLoad

IGNORED = frozenset({b"PING", b"PUBLISH", b"SPUBLISH", b"REPLCONF", b"CLUSTER"})
GATHER_BYTES = 256 * 1024
"""A capture's writers gather each shard's appends up to this many bytes
(``WriterOptions.write_buffer_bytes``); :meth:`ShardApplier.apply_batch` writes what is left
at the batch's end, so readers see a batch once it is applied, as before, with one ``write``
per shard instead of one per command."""
"""Commands of the replication stream that change no key. ``CLUSTER``: Valkey 8+ replicates
``CLUSTER SETSLOT`` to replicas that announce a version (``clusterCommandSetSlot``, and waits
for their acknowledgement before it applies it): a slot's state, no key; moonish follows slot
ownership from the topology (moonish.redis.cluster)."""

Positions = list[dict[str, Any]]
"""Per shard, its stored source position (moonish.redis.routing.sources ``decode_position``)."""


class ResumePoint(NamedTuple):
    """Where the stream stands for a set of stored positions (:func:`resume_point`).

    Attributes:
        replid: the replication ID every shard names, or ``""``: ask for everything.
        applied: the smallest stored offset (``PSYNC <replid> <applied + 1>``).
        db: the db the stream had selected there.
        done: per shard, its stored offset (a command ending at or before it is skipped).
    """

    replid: str
    applied: int
    db: int
    done: list[int]


def resume_point(positions: Positions) -> ResumePoint:
    """All shards with one replid: resume at the smallest offset; else (none, or replids
    that differ: a capture stopped while storing a new one) a full resync."""
    replids = {position.get("replid") for position in positions}
    if len(replids) != 1 or None in replids:
        return ResumePoint("", 0, 0, [0] * len(positions))
    done = [int(position["offset"]) for position in positions]
    lowest = min(range(len(positions)), key=lambda shard: done[shard])
    return ResumePoint(str(replids.pop()), done[lowest], int(positions[lowest].get("db", 0)), done)


@dataclass
class ApplierCounts:
    """What an applier did (merged over workers by the capture's report).

    Attributes:
        commands, transactions: write commands and MULTI/EXEC blocks of the stream applied
            (every applier sees all of them).
        records: per shard, records appended (0 for shards it does not own).
        rdb_keys, removed_keys: keys of full resyncs written, and found gone.
        created, updated: of ``rdb_keys``, the ``c`` and ``u`` records of resyncs written as
            differences (the rest are ``r`` rows).
        filtered: what the source filter left out (moonish.redis.routing.keyfilter's
            ``counts``): each command counted by one applier, each resync key by its shard's.
    """

    commands: int = 0
    transactions: int = 0
    records: list[int] = field(default_factory=list)
    rdb_keys: int = 0
    removed_keys: int = 0
    created: int = 0
    updated: int = 0
    filtered: dict[str, int] = field(default_factory=dict)

    def __reduce__(self) -> tuple[Any, ...]:  # (compiled by mypyc: pickled explicitly)
        fields = (self.commands, self.transactions, self.records, self.rdb_keys)
        more = (self.removed_keys, self.created, self.updated, dict(self.filtered))
        return ApplierCounts, (*fields, *more)


class ShardApplier:
    """Applies the replication stream to ``writers`` (one per shard; the ones not in
    ``owned`` are stand-ins that append nothing).

    Args:
        writers: every shard's writer, in shard order.
        owned: the shards this applier writes; ``None``: all.
        options: the sync and mark periods.
        clock: commit times and periods.
        exchange: how commands across shards of other workers run (a worker's).
        key_filter: the source filter, whose counts this applier adds to.
        link: a cluster link's id (moonish.redis.cluster): the shards store every link's
            position (``{"links": {<id>: {...}}}``) and this applier reads and writes its
            own; ``None``: a single master's ``{"replid", "offset", "db"}``.
        restamp: with ``link``, how a position of this link becomes the shard's stored
            position (moonish.redis.routing.router ``Router.restamp``).
        slots: with ``link``, the hash slots the link's node serves: a full resync removes
            only keys of these slots that its RDB lacks (``None``: every key).
    """

    def __init__(
        self,
        writers: list[ShardWriter],
        owned: Container[int] | None,
        options: CaptureOptions,
        clock: Clock,
        exchange: Exchange | None = None,
        spread: SpreadLoad | None = None,
        key_filter: KeyFilter | None = None,
        link: str | None = None,
        restamp: Callable[[int, bytes], bytes] | None = None,
        slots: Container[int] | None = None,
    ) -> None:
        count = len(writers)
        self.link, self.slots = link, slots
        self.spread, self.loads = spread, 0  # the workers' shared load order; full resyncs
        self.writers, self.options, self.clock = writers, options, clock
        self.own = [shard for shard in range(count) if owned is None or shard in owned]
        self.foreign = [owned is not None and shard not in owned for shard in range(count)]
        for writer in writers:  # a command's time is when the master ran it
            writer.live_source = True
        self.router = Router(writers, clock, exchange=exchange, key_filter=key_filter)
        self.router.skip = list(self.foreign)
        self.router.restamp = restamp
        self.key_filter = self.router.key_filter
        if owned is not None:
            self.router.counts_here = self._counts_here
        self.counts = ApplierCounts(records=self.router.records)
        if self.key_filter is not None:  # (the same Counter: the counts stay current)
            self.counts.filtered = self.key_filter.counts
        self.replid = ""
        self.applied = 0  # the offset this applier has applied up to (in memory)
        self.db = 0  # the stream's selected db after `applied`
        self.durable = 0  # the offset whose changes are synced in the owned shards
        self.done = [0] * count  # per shard, the stored offset at the last (re)start
        self.skip_below = 0  # commands ending at or before this may be stored in some shards
        self.synced_lsn = {shard: writers[shard].next_lsn for shard in self.own}
        self._prefix_replid: str | None = None  # the replid the position prefix was made for
        self._prefix = b""  # the stored position up to its offset (``_apply``)
        self.last_sync_us = self.last_mark_us = clock.now_us()
        self.stream_db = 0
        self.transaction: list[Entry] | None = None

    def _counts_here(self, argv: list[bytes]) -> bool:
        """Whether this applier counts ``argv`` when the filter leaves it out: the one
        that owns the shard of its first key (of shard 0 for a command without one)."""
        try:
            keys = keys_of(argv)
        except UnsupportedFormatError:
            return False
        return not self.foreign[shard_of_key(keys[0], len(self.writers)) if keys else 0]

    def positions(self) -> dict[int, dict[str, Any]]:
        """The stored position of each owned shard.

        Raises:
            CorruptionError: a stored position moonish did not write.
        """
        return {shard: self._stored(shard) for shard in self.own}

    def _stored(self, shard: int) -> dict[str, Any]:
        """``shard``'s stored position of this applier's stream (``{}``: none)."""
        writer = self.writers[shard]
        return link_position(writer.source, writer.shard_dir, self.link)

    def start(self, point: ResumePoint) -> None:
        """Take the stream's resume point (every shard's, :func:`resume_point`)."""
        self.replid, self.applied, self.db = point.replid, point.applied, point.db
        self.durable = point.applied
        if point.replid:
            self.done = list(point.done)
            self.skip_below = max(point.done)
        self.stream_db, self.transaction = self.db, None

    # -- a new stream -------------------------------------------------------------------

    def full_resync(
        self,
        replid: str,
        offset: int,
        payload: BinaryIO,
        path: str,
        snapshot_first: bool = True,
        snapshot_last: bool = True,
    ) -> None:
        """Load the full resync's RDB (read from ``payload``; ``path`` names the master in
        errors) into the owned shards: ``r`` rows for a shard that never finished a load
        (of this stream), else the differences (``d`` first, so the position rides on the
        last record; with :attr:`slots`, only keys of those slots are found gone); then a
        position marker where no record carried it. The shards are synced after it.
        ``snapshot_first``/``snapshot_last``: whether this load's first and last ``r`` rows
        open and close a snapshot (a cluster's first loads, one per link, make one snapshot).

        Raises:
            RdbCorruptionError, RdbUnsupportedError: an RDB moonish cannot read.
        """
        now_ms = self.clock.now_us() // 1000
        contents = read_contents(
            payload,
            path,
            len(self.writers),
            now_ms=now_ms,
            drop_expired=False,
            shards_kept=set(self.own),
        )
        position = encode_position({"replid": replid, "offset": offset, "db": 0})
        first: int | None = None
        last: int | None = None
        if self.key_filter is not None:
            kept = self.key_filter.entries
            contents.keys = [
                list(kept(keys)) if shard in self.own else keys
                for shard, keys in enumerate(contents.keys)
            ]
        loads = [bool(contents.keys[k]) and not self._stored(k) for k in range(len(self.writers))]
        order = None
        if len(self.own) == len(self.writers):  # one process, every shard in order
            first, last = load_order(loads)
            first = first if snapshot_first else None
            last = last if snapshot_last else None
        elif self.spread is not None:  # workers at once: they agree (moonish.state.spread)
            self.loads += 1
            with_rows = sum(loads[shard] for shard in self.own)
            order = self.spread.join(self.loads, with_rows, snapshot_first, snapshot_last)
        for shard in self.own:
            writer = self.writers[shard]
            rows = not self._stored(shard)  # its first load (or one cut short)
            if self.slots is None:  # before the keys: the position goes last
                set_libraries(writer, contents.functions)
            else:  # one cluster node's: the union of the nodes' (moonish.redis.cluster.functions)
                add_libraries(writer, contents.functions)
            loader = loader_for(writer, b"PSYNC")
            keys = contents.keys[shard]
            present = {(db, key) for db, key, _ in keys}
            keep = _member(present) if self.slots is None else _outside(present, self.slots)
            append = self._counted(self.router.appender(shard))
            self.counts.removed_keys += remove_missing(loader, keep, append)
            self.counts.rdb_keys += load_entries(
                loader,
                keys,
                append,
                rows=rows,
                source=position,
                load_first=shard == first,
                load_last=shard == last,
                order=order,
            )
            self.router.mark(shard, position)
        self.replid, self.applied, self.db = replid, offset, 0
        self.done = [offset] * len(self.writers)
        self.skip_below = offset
        self.stream_db, self.transaction = 0, None
        self.sync()

    def _counted(
        self, append: Callable[[list[KvChange], bytes, int], int]
    ) -> Callable[[list[KvChange], bytes, int], int]:
        """``append`` counting the ``c`` and ``u`` records of a resync's differences."""
        counts = self.counts

        def counted(records: list[KvChange], source: bytes, at_least_us: int) -> int:
            for record in records:
                if record.op == "c":
                    counts.created += 1
                elif record.op == "u":
                    counts.updated += 1
            return append(records, source, at_least_us)

        return counted

    def continued(self, replid: str, previous_replid: str | None) -> None:
        """``+CONTINUE``; after a failover (``previous_replid``) the stream goes on under
        ``replid``, which every owned shard stores from now on."""
        if previous_replid is not None:
            self.replid = replid
            for shard in self.own:
                stored = self._stored(shard)
                if not stored:
                    continue
                self.router.mark(
                    shard,
                    encode_position(
                        {
                            "replid": replid,
                            "offset": stored["offset"],
                            "db": stored.get("db", 0),
                        }
                    ),
                )
        self.stream_db, self.transaction = self.db, None

    def disconnected(self) -> None:
        """After a lost connection: an unfinished MULTI comes again; sync what is applied."""
        self.transaction = None
        self.stream_db = self.db
        self.sync()

    # -- the command stream -------------------------------------------------------------

    def apply_part(
        self,
        part: list[ReplCommand],
        path: str,
        dropped: int,
        settled_end: int,
        settled_db: int,
    ) -> None:
        """Apply a worker's part of a batch (:class:`StreamRoute`): its commands, then
        count the ``dropped`` ones as applied and stand where the batch left the stream."""
        self.apply_batch(part, path)
        self.counts.commands += dropped
        if settled_end > self.applied:
            self.applied, self.db = settled_end, settled_db

    def apply_batch(self, batch: list[ReplCommand], path: str) -> None:
        """Apply ``batch`` in order (moonish.redis.capture.runner's docstring, 2); errors name
        ``path`` (the master) and the command's offset.

        Raises:
            UnsupportedFormatError: a command moonish does not implement, a bad SELECT,
                MULTI inside MULTI or EXEC without MULTI.
            CommandError: a command Redis would have refused.
            ResumeError: a command across shards stored in some of them only.
        """
        if self.slots is not None:  # a cluster link: a FLUSHALL reaches its node's keys only
            for writer in self.writers:
                writer.keyspace.slots = self.slots
        for start, end, argv in batch:
            name = argv[0].upper()
            if name == b"SELECT":
                self.stream_db = _select(argv, path, start)
            elif name == b"MULTI":
                if self.transaction is not None:
                    raise UnsupportedFormatError("MULTI inside MULTI", path=path, offset=start)
                self.transaction = []
            elif name == b"EXEC":
                if self.transaction is None:
                    raise UnsupportedFormatError("EXEC without MULTI", path=path, offset=start)
                entries, self.transaction = self.transaction, None
                self._apply(entries, True, end, path)
                self.counts.transactions += 1
            elif name in IGNORED:
                pass
            elif self.transaction is not None:
                self.transaction.append((self.stream_db, argv, start))
                continue
            else:
                self._apply([(self.stream_db, argv, start)], False, end, path)
            if self.transaction is None:
                self.applied, self.db = end, self.stream_db
        self.flush()

    def flush(self) -> None:
        """Write what the owned shards' logs gathered (:data:`GATHER_BYTES`): readers see
        every record appended so far."""
        for shard in self.own:
            self.writers[shard].flush()

    def _apply(self, entries: list[Entry], transaction: bool, end: int, path: str) -> None:
        router, foreign = self.router, self.foreign
        if end <= self.skip_below:  # some shards may hold it (a restart): the same in every worker
            resumed = [stored >= end for stored in self.done]
            if all(resumed):
                return
            router.skip = [skip or done for skip, done in zip(foreign, resumed, strict=True)]
            router.resumed = resumed
        elif router.skip != foreign:
            router.skip = list(foreign)
            router.resumed = [False] * len(foreign)
        replid = self.replid
        if replid != self._prefix_replid:  # encode_position's bytes, made without a dict
            self._prefix = encode_position({"replid": replid, "offset": 0})[: -len(b"0}")]
            self._prefix_replid = replid
        router.position = b'%s%d,"db":%d}' % (self._prefix, end, self.stream_db)
        commands = router.commands
        router.apply(entries, transaction, path)  # errors name the path and the offset
        self.counts.commands += router.commands - commands

    # -- durability and markers ---------------------------------------------------------

    def tick(self) -> bool:
        """Sync the written shards when ``sync_interval_ms`` has passed; every
        ``mark_interval_ms``, expire overdue keys (:meth:`expire_overdue`) and mark the
        shards whose position lags. Whether :attr:`durable` advanced."""
        now = self.clock.now_us()
        options = self.options
        if now - self.last_mark_us >= options.mark_interval_ms * 1000:
            self.last_mark_us = now
            self.expire_overdue(now)
            self.mark_behind()
            self.flush()
        if self.applied > self.durable and (
            now - self.last_sync_us >= options.sync_interval_ms * 1000
        ):
            self.sync()
            return True
        return False

    def expire_overdue(self, now_us: int) -> None:
        """Expire, in every owned shard, the keys and hash fields whose expiry time is more
        than ``overdue_expiry_ms`` before ``now_us`` (moonish.state.expiry ``sweep``: ``d``
        records marked ``expired``, command ``DEL``; ``HDEL`` for fields). The master expires
        such keys itself and sends a ``DEL``, but not for a key that expired while it
        reloaded (``DEBUG RELOAD``), which would otherwise stay until the next full resync;
        a ``DEL`` that comes after this sweep finds no key and writes nothing."""
        before_ms = now_us // 1000 - self.options.overdue_expiry_ms
        for shard in self.own:
            writer = self.writers[shard]
            records = sweep(writer.keyspace, writer.stream, before_ms)
            if records:
                self.router.append(shard, records, False, now_us, b"")

    def sync(self) -> None:
        """Sync the owned shards written since the last sync: everything up to
        :attr:`applied` is durable."""
        for shard in self.own:
            writer = self.writers[shard]
            if writer.next_lsn != self.synced_lsn[shard]:
                writer.sync()
                self.synced_lsn[shard] = writer.next_lsn
        self.durable = self.applied
        self.last_sync_us = self.clock.now_us()

    def mark_behind(self) -> None:
        """A position marker in every owned shard whose stored offset is behind
        :attr:`applied`."""
        if not self.replid:
            return
        for shard in self.own:
            stored = self._stored(shard)
            if stored.get("replid") == self.replid and int(stored["offset"]) >= self.applied:
                continue
            position = {"replid": self.replid, "offset": self.applied, "db": self.db}
            self.router.mark(shard, encode_position(position))

    def finish(self) -> None:
        """Stopping: every owned shard stores the applied position, all synced."""
        self.mark_behind()
        for shard in self.own:
            self.writers[shard].sync()
            self.synced_lsn[shard] = self.writers[shard].next_lsn
        self.durable = self.applied


class StreamRoute:
    """Which worker of a capture in several processes needs which command of the stream
    (moonish.redis.capture.workers): a command of one key (``argv[1]``) outside ``MULTI``
    goes to the worker of that key's shard alone; ``SELECT``, ``MULTI``, ``EXEC``, what is
    between them and every other command go to every worker; ``PING``, ``PUBLISH`` and
    ``REPLCONF`` to none. It follows the stream's state as the appliers do (the selected db,
    an open ``MULTI``), so it can tell them where the stream stands after each batch.

    Args:
        owner: the worker of each shard.
        workers: how many workers.
    """

    def __init__(self, owner: list[int], workers: int) -> None:
        self.owner, self.workers = owner, workers
        self.db = 0
        self.in_multi = False
        self._single: dict[bytes, bool] = {}

    def reset(self, db: int) -> None:
        """A new stream (a connection): ``db`` selected, no ``MULTI`` open."""
        self.db, self.in_multi = db, False

    def split(self, batch: list[ReplCommand]) -> tuple[list[list[Any]], list[int], int, int]:
        """``batch`` split by worker: per worker its commands (plain tuples) and how many
        write commands it does not get (counted as applied: they are not its shards'), then
        the offset after which the stream is outside a ``MULTI`` (-1: nowhere in the batch)
        and the db selected there."""
        parts: list[list[Any]] = [[] for _ in range(self.workers)]
        dropped = [0] * self.workers
        settled_end, settled_db = -1, self.db
        owner, count = self.owner, len(self.owner)
        for start, end, argv in batch:
            name = argv[0].upper()
            to = -1  # every worker
            if name == b"SELECT":
                db = selected_db(argv)
                if db is not None:  # (a bad one: the workers raise)
                    self.db = db
            elif name == b"MULTI":
                self.in_multi = True
            elif name == b"EXEC":
                self.in_multi = False
            elif self.in_multi:
                pass
            elif name in IGNORED:
                to = -2  # none
            else:
                single = self._single.get(name)
                if single is None:
                    single = is_single(name)
                    if single is not None:
                        self._single[name] = single
                if single and len(argv) > 1:
                    to = owner[shard_of_key(argv[1], count)]
            item = (start, end, argv)
            if to == -1:
                for part in parts:
                    part.append(item)
            elif to >= 0:
                parts[to].append(item)
                for worker in range(self.workers):
                    if worker != to:
                        dropped[worker] += 1
            if not self.in_multi:
                settled_end, settled_db = end, self.db
        return parts, dropped, settled_end, settled_db


def _member(keys: set[tuple[int, bytes]]) -> Callable[[int, bytes], bool]:
    return lambda db, key: (db, key) in keys


def _outside(keys: set[tuple[int, bytes]], slots: Container[int]) -> Callable[[int, bytes], bool]:
    """Kept by a resync of a node serving ``slots``: a key it holds, or one of another slot."""
    return lambda db, key: (db, key) in keys or hash_slot(key) not in slots


def _select(argv: list[bytes], path: str, offset: int) -> int:
    db = selected_db(argv)
    if db is None:
        raise UnsupportedFormatError(f"bad SELECT {argv[1:]!r}", path=path, offset=offset)
    return db
