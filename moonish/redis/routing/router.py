"""Applying Redis write commands to a set of shards: routing by hash slot, atomic batches,
commands whose keys live in several shards, and resuming without applying anything twice.

Routing (moonish.redis.routing.commands, docs/redis-import.md): each key's records go to the
shard of its Redis Cluster hash slot (``k = slot * shards // 16384``); a multi-key command
becomes one record per key, as one atomic batch per shard; ``FLUSHDB``/``FLUSHALL``/``SWAPDB``
go to every shard; a ``MULTI``/``EXEC`` block is one atomic batch per shard it touches. A
command moonish does not implement is an error naming it and its offset; with
``skip_unsupported`` it is written as a :data:`SKIPPED_PREFIX` message (its RESP bytes) instead,
on the shard of its first argument or on every shard when it has none; scripts are always
refused.

Resuming: the caller sets :attr:`Router.position` (the source position after the command) and
:attr:`Router.skip` (the shards whose stored position shows they already applied it) before
each :meth:`Router.apply`. Skipped shards run nothing; the others append the command's
records with the position on the last one (moonish.redis.routing.sources), so a shard's log says
exactly which commands it holds. A command whose keys span several shards, found applied in
some of them and not in others, cannot be completed (its effect on the others depends on keys
already changed): :class:`ResumeError`. So that a shard in which such a command changed
nothing is not mistaken for one it never reached, every shard of the command stores the
position, with a :func:`~moonish.log.records.position_marker` when it has no record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from moonish.clock import Clock, SystemClock, system_now_us
from moonish.errors import (
    CommandError,
    CorruptionError,
    InvalidArgumentError,
    UnsupportedFormatError,
)
from moonish.log.records import MAX_DB, KvChange, Message, Replay, position_marker
from moonish.redis.replication.resp import encode_command
from moonish.redis.routing.commands import ALL_KEYS, KEYLESS
from moonish.redis.routing.keyfilter import FilterConflictError, KeyFilter
from moonish.slots import shard_of_key
from moonish.state.commands.execute import COMMANDS, SCRIPTS, execute, keys_of
from moonish.state.commands.sort import reads_patterns
from moonish.state.rebuild import FILTERED_PREFIX
from moonish.state.shard import Prepared, ShardWriter

SKIPPED_PREFIX: Final = "moonish.skipped"
"""The prefix of the message records of commands an import skipped (``skip_unsupported``)."""

Entry = tuple[int, list[bytes], int]
"""A command to apply: (db, argv, byte offset in its source, for errors)."""


class ResumeError(CorruptionError):
    """A command across shards is in some shards' logs but not in others' (a crash between
    its appends): the import cannot continue exactly once."""


class Exchange(Protocol):
    """How a worker of a parallel import or capture runs a command across shards some of
    which another worker writes (moonish.redis.routing.exchange)."""

    def owns_all(self, shards: list[int]) -> bool:
        """Whether this process writes every one of ``shards``."""

    def across(
        self, router: Router, db: int, argv: list[bytes], now_us: int, shards: list[int]
    ) -> list[tuple[int, Prepared]]:
        """Run the command with the other workers; this process's shards' results."""


class Tally:
    """A count kept in place: counting in a dict of ints makes an int object per increment
    (and frees the one it replaces)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class Router:
    """Runs commands on the shards' keyspaces and appends their records.

    Attributes:
        records: records appended, per shard.
        commands, per_command: commands applied (by upper-case name).
        skipped: commands written as ``moonish.skipped`` messages, by name.
        key_filter: the source filter applied before anything runs (``None``: none;
            moonish.redis.routing.keyfilter), with its counts.
        counts_here: whether this router counts a command the filter leaves out (``None``:
            every one; a capture's workers each count a share).
        first_lsn: per shard, the first LSN this router appended, or ``None``.
        skip: per shard, whether the next command is already applied there.
        position: the source position to store with the next command's records.
        restamp: ``None``, or how a position given to :meth:`append` becomes the one the
            shard stores, from the shard and the position (a cluster capture's links share
            the shards: each shard stores every link's position, moonish.redis.cluster).
    """

    def __init__(
        self,
        writers: list[ShardWriter],
        clock: Clock,
        skip_unsupported: bool = False,
        exchange: Exchange | None = None,
        key_filter: KeyFilter | None = None,
    ) -> None:
        if key_filter is not None and key_filter.spec.types is not None and exchange is not None:
            raise InvalidArgumentError(
                "a types filter runs in one process (it asks the keyspace which keys it "
                "holds): drop --processes or the types filter"
            )
        self.writers = writers
        self.key_filter = key_filter if key_filter is not None and key_filter.spec.active else None
        self.counts_here: Callable[[list[bytes]], bool] | None = None
        self.exchange = exchange
        self.clock = clock
        self._now_us = clock.now_us  # (bound once: the command loop calls it per command)
        self._system_clock = type(clock) is SystemClock  # then system_now_us, called directly
        self.skip_unsupported = skip_unsupported
        self.commands = 0
        self._names: dict[bytes, Tally] = {}  # commands applied, by name as received
        self._single: dict[bytes, bool] = {}  # upper-case name: its only key is argv[1]
        self.skipped: Counter[str] = Counter()
        self.records = [0] * len(writers)
        self.first_lsn: list[int | None] = [None] * len(writers)
        self.skip = [False] * len(writers)
        self.resumed = [False] * len(writers)
        """With an exchange (several workers): per shard, whether its log holds the next
        command already, as every worker sees it (``skip`` also marks other workers'
        shards); a command across shards some of which hold it is a ResumeError in every
        worker alike."""
        self.position = b""
        self.restamp: Callable[[int, bytes], bytes] | None = None
        self._involved: set[int] = set()  # shards of a command across shards

    def apply(self, entries: list[Entry], transaction: bool, path: str = "") -> None:
        """Run ``entries`` and append their records: per shard one atomic batch when they
        come from MULTI/EXEC or make more than one record, else a plain append.

        Raises:
            CommandError: Redis would have refused a command (so it cannot be in a valid AOF).
            UnsupportedFormatError: a command moonish does not implement (and may not skip).
            Both name ``path`` and the command's offset.
            ResumeError: a command across shards applied in some of them only.
        """
        if self.key_filter is not None:
            entries = self._filtered(entries, path)
            if not entries:
                return
        now_us = system_now_us() if self._system_clock else self._now_us()
        per_shard: dict[int, list[KvChange | Message]] = {}
        single = len(entries) == 1 and not transaction
        key_filter, here = self.key_filter, self.counts_here
        for db, argv, offset in entries:
            results = self._checked_run(db, argv, offset, now_us, path, per_shard)
            if results is None:  # skipped
                continue
            if key_filter is not None and key_filter.silences(argv, here is None or here(argv)):
                results = [(shard, self._silenced(shard, db, argv, p)) for shard, p in results]
            if single and len(results) == 1 and not self._involved:
                # Most commands: one, on one shard, appended without gathering per shard.
                shard, prepared = results[0]
                records = self._collect(shard, prepared, now_us, path, offset)
                if records:
                    self.append(shard, records, len(records) > 1, now_us, self.position)
                return
            self._collect_all(results, per_shard, now_us, path, offset)
        involved = self._involved
        for shard in involved:
            if shard not in per_shard:  # its position must move past the command
                per_shard[shard] = [position_marker(self.position)]
        for shard in sorted(per_shard) if len(per_shard) > 1 else per_shard:
            records = per_shard[shard]
            self.append(shard, records, transaction or len(records) > 1, now_us, self.position)
        if involved:  # written together, as if unbuffered: a kill between them is rare
            for shard in sorted(involved):
                self.writers[shard].flush()
            involved.clear()

    def apply_one(self, db: int, argv: list[bytes], offset: int, path: str = "") -> None:
        """``apply([(db, argv, offset)], False, path)``: one command outside a transaction,
        run without gathering its results per shard when the router has one shard and no
        source filter (an import's commands, mostly)."""
        if self.key_filter is not None or len(self.writers) != 1:
            self.apply([(db, argv, offset)], False, path)
            return
        now_us = system_now_us() if self._system_clock else self._now_us()
        if self.skip[0]:  # applied there already: counted, not run (as apply)
            self._count(argv[0])
            return
        try:  # an unsupported command raises before it ran
            reply, expired, records = self.writers[0].prepare_parts(db, argv, now_us, True)
        except UnsupportedFormatError as exc:
            skipped: dict[int, list[KvChange | Message]] = {}
            self._unsupported(exc, db, argv, offset, path, skipped)
            for shard, queued in skipped.items():
                self.append(shard, queued, len(queued) > 1, now_us, self.position)
            return
        except CommandError as exc:
            raise CommandError(exc.message, path=path, offset=offset) from None
        self._count(argv[0])
        if isinstance(reply, CommandError):
            raise CommandError(reply.message, path=path, offset=offset)
        if expired:
            self.append(0, expired, False, now_us, b"")
        if records:
            self.append(0, records, len(records) > 1, now_us, self.position)

    def _count(self, name: bytes) -> None:
        """Count an applied command (by name as received)."""
        self.commands += 1
        self._tally(name).count += 1

    def _tally(self, name: bytes) -> Tally:
        tally = self._names.get(name)
        if tally is None:
            tally = self._names[name] = Tally()
        return tally

    def _silenced(self, shard: int, db: int, argv: list[bytes], prepared: Prepared) -> Prepared:
        """``prepared`` with its records replaced by one :data:`FILTERED_PREFIX` message of
        the command's part in ``shard`` (``exclude_commands``: the keyspace ran it, the stream
        leaves its changes out, a rebuild runs it again from the message)."""
        reply, expired, records = prepared
        if not records:
            return prepared
        name, count = argv[0].upper(), len(self.writers)
        part = argv
        if name in ALL_KEYS:
            part = [argv[0], *[key for key in argv[1:] if shard_of_key(key, count) == shard]]
        elif name == b"MSET":
            pairs = zip(argv[1::2], argv[2::2], strict=True)
            mine = [
                x for key, value in pairs if shard_of_key(key, count) == shard for x in (key, value)
            ]
            part = [argv[0], *mine]
        message = Message(FILTERED_PREFIX, encode_command(*part), db)
        return Prepared(reply, expired, [message])

    def _filtered(self, entries: list[Entry], path: str) -> list[Entry]:
        """``entries`` as the source filter keeps them (commands left out or cut down)."""
        key_filter, kept, here = self.key_filter, [], self.counts_here
        assert key_filter is not None
        for db, argv, offset in entries:
            count = here is None or here(argv)
            try:
                run = key_filter.command(
                    db, argv, self._holds, path=path, offset=offset, count=count
                )
            except FilterConflictError:
                raise
            except UnsupportedFormatError:
                run = argv  # not a command moonish implements: refused (or skipped) below
            if run is not None:
                kept.append((db, run, offset))
        return kept

    def _holds(self, db: int, key: bytes) -> bool:
        """Whether the keyspace of ``key``'s shard holds ``(db, key)``."""
        writer = self.writers[shard_of_key(key, len(self.writers))]
        return writer.keyspace.get(db, key) is not None

    def _checked_run(
        self,
        db: int,
        argv: list[bytes],
        offset: int,
        now_us: int,
        path: str,
        per_shard: dict[int, list[KvChange | Message]],
    ) -> list[tuple[int, Prepared]] | None:
        """:meth:`_run` with its errors named by ``path`` and ``offset``; ``None`` when the
        command was unsupported and is skipped (its message queued in ``per_shard``)."""
        try:  # an unsupported command raises before any shard ran it
            results = self._run(db, argv, now_us)
        except UnsupportedFormatError as exc:
            self._unsupported(exc, db, argv, offset, path, per_shard)
            return None
        except CommandError as exc:
            raise CommandError(exc.message, path=path, offset=offset) from None
        self._count(argv[0])
        return results

    def _unsupported(
        self,
        exc: UnsupportedFormatError,
        db: int,
        argv: list[bytes],
        offset: int,
        path: str,
        per_shard: dict[int, list[KvChange | Message]],
    ) -> None:
        """A command moonish does not implement: refused (``exc`` named by ``path`` and
        ``offset``), or with ``skip_unsupported`` its message queued in ``per_shard``."""
        script = argv[0].upper() in SCRIPTS
        if script or not self.skip_unsupported:
            hint = (
                ""
                if script
                else (
                    "; --skip-unsupported (skip_unsupported=True) writes it as a "
                    f"{SKIPPED_PREFIX} message record instead"
                )
            )
            raise UnsupportedFormatError(exc.message + hint, path=path, offset=offset) from None
        self._skip(db, argv, per_shard)

    def _collect(
        self, shard: int, prepared: Prepared, now_us: int, path: str, offset: int
    ) -> list[KvChange | Message]:
        """The records of a command on ``shard``, its expiry records appended first."""
        reply, expired, records = prepared
        if isinstance(reply, CommandError):
            raise CommandError(reply.message, path=path, offset=offset)
        if expired:
            self.append(shard, expired, False, now_us, b"")
        return records

    def _collect_all(
        self,
        results: list[tuple[int, Prepared]],
        per_shard: dict[int, list[KvChange | Message]],
        now_us: int,
        path: str,
        offset: int,
    ) -> None:
        """:meth:`_collect` of every shard's results, gathered per shard in ``per_shard``."""
        for shard, prepared in results:
            records = self._collect(shard, prepared, now_us, path, offset)
            if records:
                if shard in per_shard:
                    per_shard[shard] += records
                else:
                    per_shard[shard] = records

    @property
    def per_command(self) -> Counter[str]:
        """Commands applied, by upper-case name."""
        counts: Counter[str] = Counter()
        for name, tally in self._names.items():
            counts[name.upper().decode(errors="replace")] += tally.count
        return counts

    def add_counts(self, other: Router) -> None:
        """Count ``other``'s commands (applied and skipped) as this router's too."""
        self.commands += other.commands
        for name, theirs in other._names.items():
            self._tally(name).count += theirs.count
        self.skipped += other.skipped

    def _skip(
        self, db: int, argv: list[bytes], per_shard: dict[int, list[KvChange | Message]]
    ) -> None:
        """Queue the ``moonish.skipped`` record of ``argv`` on the shard of its first argument
        (every shard when it has none, or is a keyless command's: FUNCTION KILL)."""
        message = Message(SKIPPED_PREFIX, encode_command(*argv), db)
        count = len(self.writers)
        keyed = len(argv) > 1 and argv[0].upper() not in KEYLESS
        for shard in [shard_of_key(argv[1], count)] if keyed else range(count):
            per_shard.setdefault(shard, []).append(message)
        self.skipped[argv[0].upper().decode(errors="replace")] += 1

    def appender(self, shard: int) -> Callable[[list[KvChange], bytes, int], int]:
        """A function appending loaded records to ``shard``, each alone, with a source
        position on the last, at a commit time of at least its third argument (µs), and
        returning the commit time (moonish.state.load's ``Append``), counted here."""

        def append(records: list[KvChange], source: bytes, at_least_us: int) -> int:
            self.append(shard, records, False, max(self.clock.now_us(), at_least_us), source)
            return self.writers[shard].last_commit_us

        return append

    def mark(self, shard: int, position: bytes) -> None:
        """Store ``position`` in ``shard``'s log with a :func:`position_marker` unless it
        already holds it (the end of an import: a shard the last commands did not touch)."""
        if self.restamp is not None:
            position = self.restamp(shard, position)
        if self.writers[shard].source != position:
            self._write(shard, [position_marker(position)], False, self.clock.now_us(), position)

    def append(
        self,
        shard: int,
        records: Sequence[KvChange | Message],
        atomic: bool,
        now_us: int,
        source: bytes,
    ) -> None:
        if self.restamp is not None and source:
            source = self.restamp(shard, source)
        self._write(shard, records, atomic, now_us, source)

    def _write(
        self,
        shard: int,
        records: Sequence[KvChange | Message],
        atomic: bool,
        now_us: int,
        source: bytes,
    ) -> None:
        first = self.writers[shard].append_first(records, atomic, now_us, source)
        if first:  # (0: nothing appended, as by a shard without a log: KeyspaceShard)
            if self.first_lsn[shard] is None:
                self.first_lsn[shard] = first
            self.records[shard] += len(records)

    def _run(self, db: int, argv: list[bytes], now_us: int) -> list[tuple[int, Prepared]]:
        writers, skip = self.writers, self.skip
        shards = len(writers)
        if shards == 1:  # every key, and every keyless command, is shard 0's
            return [] if skip[0] else [(0, writers[0].prepare(db, argv, now_us, loading=True))]
        name = argv[0].upper()
        single = self._single.get(name)
        if single is None:
            single = self._is_single(name)
        if single and len(argv) > 1:  # most commands: the shard of argv[1]
            shard = shard_of_key(argv[1], shards)
            if skip[shard]:
                return []
            return [(shard, writers[shard].prepare(db, argv, now_us, loading=True))]
        if name in KEYLESS:
            parts = [(shard, argv) for shard in range(shards)]
        else:
            groups: dict[int, list[bytes]] = {}
            for key in keys_of(argv):
                groups.setdefault(shard_of_key(key, shards), []).append(key)
            if name == b"SORT" and reads_patterns(argv):
                return self._across(db, argv, now_us, sorted(groups))  # BY/GET keys: anywhere
            if len(groups) <= 1:
                parts = [(next(iter(groups), 0), argv)]
            elif name in ALL_KEYS:
                parts = [(shard, [argv[0], *keys]) for shard, keys in groups.items()]
            elif name == b"MSET":
                pairs = dict(zip(argv[1::2], argv[2::2], strict=True))
                parts = [
                    (shard, [argv[0], *[x for key in keys for x in (key, pairs[key])]])
                    for shard, keys in groups.items()
                ]
            else:
                return self._across(db, argv, now_us, sorted(groups))
        return [
            (shard, writers[shard].prepare(db, sub, now_us, loading=True))
            for shard, sub in parts
            if not skip[shard]
        ]

    def _is_single(self, name: bytes) -> bool | None:
        """Whether the command ``name`` (upper case) has exactly one key, ``argv[1]``
        (cached); ``None`` for a command moonish does not know (running it raises)."""
        single = is_single(name)
        if single is not None:
            self._single[name] = single
        return single

    def _across(
        self, db: int, argv: list[bytes], now_us: int, shards: list[int]
    ) -> list[tuple[int, Prepared]]:
        """A command whose keys live in several shards (RENAME, COPY, SMOVE, LMOVE, MSETNX
        across shards): run once on all their keyspaces; each shard logs its keys' new
        values (``Replay.STATE``), since no shard can replay the command alone.

        Raises:
            ResumeError: some of ``shards`` already hold its records and others do not.
        """
        exchange = self.exchange
        stored = self.skip if exchange is None else self.resumed  # (skip: others' too)
        done = [shard for shard in shards if stored[shard]]
        if (
            not done
            and exchange is not None
            and (argv[0].upper() == b"SORT" or not exchange.owns_all(shards))
        ):  # (SORT BY/GET: its patterns may read keys of any worker's shards)
            self._involved.update(shards)
            return exchange.across(self, db, argv, now_us, shards)
        if done:
            if len(done) == len(shards):
                return []
            name = argv[0].decode(errors="replace")
            raise ResumeError(
                f"{name} changes keys of shards {shards}; shards {done} hold its records and "
                "the others do not (the import was stopped between them), so it cannot be "
                "completed exactly once: import into a new data directory"
            )
        self._involved.update(shards)  # each stores the position, with records or without
        return self.run_across(db, argv, now_us, shards, self.writers)

    def run_across(
        self,
        db: int,
        argv: list[bytes],
        now_us: int,
        shards: list[int],
        writers: list[ShardWriter],
    ) -> list[tuple[int, Prepared]]:
        """Run a command across ``shards`` on the keyspaces of ``writers`` (one per shard; a
        parallel import's worker passes stand-ins for other workers' shards); each shard's
        records (``Replay.STATE``) and the reply."""
        count = len(writers)

        def route(key: bytes) -> int:
            return shard_of_key(key, count)

        acc = writers[shards[0]].access(
            now_us // 1000, lambda key: writers[route(key)].keyspace, loading=True
        )
        acc.keyspaces = [writer.keyspace for writer in writers]
        try:
            reply = execute(acc, db, argv)
        except CommandError as exc:
            reply = exc
        results = []
        for shard in shards:
            writer = writers[shard]
            expired = [
                writer.expiry_record(key_db, key, entry)
                for key_db, key, entry in acc.expired
                if route(key) == shard
            ]
            records = writer.records(acc, argv, Replay.STATE, owns=_owned_by(route, shard))
            results.append((shard, Prepared(reply, expired, records)))
        return results


def is_single(name: bytes) -> bool | None:
    """Whether the command ``name`` (upper case) has exactly one key, ``argv[1]`` (then it
    runs in that key's shard alone); ``None`` for a command moonish does not know."""
    found = COMMANDS.get(name)
    if found is None:
        return None
    return name not in KEYLESS and name != b"SORT" and found[1] == [1]


def selected_db(argv: list[bytes]) -> int | None:
    """The db a ``SELECT`` command names, or ``None`` when it names none moonish keeps
    (``0..MAX_DB``)."""
    try:
        db = int(argv[1])
    except (IndexError, ValueError):
        return None
    return db if 0 <= db <= MAX_DB else None


def _owned_by(route: Callable[[bytes], int], shard: int) -> Callable[[bytes], bool]:
    return lambda key: route(key) == shard
