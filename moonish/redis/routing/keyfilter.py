"""Source filters: which keys a data directory keeps, decided before the keyspace and the log.

A filter keeps a key when its name matches one of ``include_keys`` (all keys when empty) and
none of ``exclude_keys`` (Redis glob patterns, read as ``SCAN ... MATCH`` reads them:
``stringmatchlen`` in Redis's ``util.c``, case-sensitive), its db is one of ``dbs`` (all when
``None``) and its Redis type one of ``types`` (all when ``None``). A key left out never reaches
the keyspace or the WAL: it has no records, images, envelopes or snapshot rows. Every other
key's state stays exactly Redis's, so a command that would compute a kept key from a key left
out cannot be applied: :class:`FilterConflictError` (docs/filters.md has the rules).

A command is kept, left out, or cut down to its kept part:

- every key kept: kept as it is; no key kept: left out;
- keys that are independent (``DEL``, ``UNLINK``, ``MSET``, ``MSETNX``, ``PFCOUNT``): only the
  kept keys' part;
- a source kept and its destination left out: only what happens to the source (``RENAME`` →
  ``DEL`` of the source; ``SMOVE`` → ``SREM``; ``LMOVE``/``RPOPLPUSH`` → the pop; a ``*STORE``,
  ``COPY``, ``BITOP``, ``PFMERGE``, ``SORT ... STORE``: nothing, their sources do not change);
- a destination kept whose new value depends on a source left out: ``FilterConflictError``,
  except ``SMOVE``, whose destination gains the member the command names (``SADD``).

Commands in a db left out are left out; ``SWAPDB`` of a kept db with one left out, a ``MOVE``
or ``COPY ... DB`` into a kept db from one left out, are conflicts; out of a kept db into one
left out, a ``MOVE`` removes the key. With ``types``, a command of a type left out (``LPUSH``
when lists are left out) becomes a ``DEL`` of the keys it writes (it may overwrite a key of a
kept type: ``SET`` over a hash), ``RESTORE`` is judged by its payload's type, and ``RENAME``,
``COPY`` or ``MOVE`` of a key moonish does not hold (so of a type left out) removes what the
destination held. ``types`` that keep sorted sets must keep sets (``ZUNIONSTORE`` reads sets).

``exclude_commands`` works the other way: the keyspace runs those commands, but their changes
are left out of the stream; the router writes a ``moonish.filtered`` message in their place
(moonish.state.rebuild replays it), so later images stay true.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from moonish.errors import InvalidArgumentError, UnsupportedFormatError
from moonish.keypatterns import KeyPatterns, pattern_bytes, pattern_text
from moonish.metrics.families import count_filtered
from moonish.redis.rdb.values import TYPE_NAMES
from moonish.state.commands import (
    bits,
    geo,
    hash_getset,
    hash_ttl,
    hyperloglog,
    sorted_sets,
    stream_groups,
    streams,
    strings,
)
from moonish.state.commands.execute import COMMANDS, keys_of
from moonish.state.commands.sort import reads_patterns
from moonish.values.model import HASH, LIST, SET, STREAM, STRING, TYPES, ZSET, Entry

INDEPENDENT: Final = frozenset({b"DEL", b"UNLINK", b"MSET", b"MSETNX", b"PFCOUNT"})
"""Commands whose keys do not depend on each other: cut down to their kept keys."""
SOURCE_FIRST: Final = frozenset(
    {b"RENAME", b"RENAMENX", b"COPY", b"SMOVE", b"LMOVE", b"RPOPLPUSH", b"SORT"}
    | {b"GEORADIUS", b"GEORADIUSBYMEMBER"}
)
"""Commands whose first key is the source and whose second (if any) is the destination."""
DESTINATION_FIRST: Final = frozenset(
    {b"SUNIONSTORE", b"SINTERSTORE", b"SDIFFSTORE", b"ZUNIONSTORE", b"ZINTERSTORE"}
    | {b"ZDIFFSTORE", b"ZRANGESTORE", b"GEOSEARCHSTORE", b"BITOP", b"PFMERGE"}
)
"""Commands whose first key is the destination and whose others are sources."""

_LISTS: Final = (b"LINSERT", b"LMOVE", b"LPOP", b"LPUSH", b"LPUSHX", b"LREM", b"LSET")
_TYPED: Final[dict[str, Iterable[bytes]]] = {
    STRING: [*strings.COMMANDS, *bits.COMMANDS, *hyperloglog.COMMANDS],
    HASH: [
        *(b"HDEL", b"HINCRBY", b"HINCRBYFLOAT", b"HMSET", b"HSET", b"HSETNX"),
        *hash_ttl.COMMANDS,
        *hash_getset.COMMANDS,
    ],
    LIST: [*_LISTS, b"LTRIM", b"RPOP", b"RPOPLPUSH", b"RPUSH", b"RPUSHX"],
    SET: [b"SADD", b"SDIFFSTORE", b"SINTERSTORE", b"SMOVE", b"SPOP", b"SREM", b"SUNIONSTORE"],
    ZSET: [*sorted_sets.COMMANDS, *geo.COMMANDS],
    STREAM: [*streams.COMMANDS, *stream_groups.COMMANDS],
}
TYPE_OF: Final = {name: kind for kind, names in _TYPED.items() for name in names}
"""Upper-case command name -> the Redis type of the keys it writes; commands absent here
(``DEL``, ``EXPIRE``, ``RENAME``, ...) work on any type (``SORT ... STORE`` writes a list and
``RESTORE`` its payload's type: judged apart)."""

PER_SHARD: Final = frozenset({b"DEL", b"UNLINK", b"MSET", b"FLUSHALL", b"FLUSHDB", b"SWAPDB"})
"""Commands besides those of one key that each shard runs on its own part (what
``exclude_commands`` may name)."""

INCLUDE_RULE: Final = "include_keys"
"""The rule name under which keys matching none of ``include_keys`` are counted."""


class FilterConflictError(UnsupportedFormatError):
    """A command would compute a key the filter keeps from one it leaves out (whose value
    moonish does not hold): it cannot be applied without making the kept key's state
    untrue."""


@dataclass(frozen=True)
class FilterSpec:
    """What a data directory keeps (see the module docstring).

    Attributes:
        include_keys, exclude_keys: Redis glob patterns (bytes).
        dbs: the dbs kept (``None``: all).
        types: the Redis types kept (``None``: all): ``string``, ``hash``, ``list``, ``set``,
            ``zset``, ``stream``.
        exclude_commands: commands (upper case) whose changes are left out of the stream;
            the keyspace still follows them (module docstring).
    """

    include_keys: tuple[bytes, ...] = ()
    exclude_keys: tuple[bytes, ...] = ()
    dbs: tuple[int, ...] | None = None
    types: tuple[str, ...] | None = None
    exclude_commands: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """Whether the filter leaves anything out."""
        return bool(self.include_keys or self.exclude_keys or self.exclude_commands) or (
            self.dbs is not None or self.types is not None
        )

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON members (patterns as text, bytes that are not UTF-8 escaped as
        ``\\udcXX``)."""
        return {
            "include_keys": [pattern_text(p) for p in self.include_keys],
            "exclude_keys": [pattern_text(p) for p in self.exclude_keys],
            "dbs": None if self.dbs is None else list(self.dbs),
            "types": None if self.types is None else list(self.types),
            "exclude_commands": list(self.exclude_commands),
        }

    @classmethod
    def from_json(cls, members: dict[str, Any]) -> FilterSpec:
        """The inverse of :meth:`to_json`.

        Raises:
            InvalidArgumentError: as :func:`filter_spec`.
        """
        return filter_spec(
            members.get("include_keys") or (),
            members.get("exclude_keys") or (),
            members.get("dbs"),
            members.get("types"),
            members.get("exclude_commands") or (),
        )


NO_FILTER: Final = FilterSpec()


def filter_spec(
    include_keys: Iterable[str | bytes] = (),
    exclude_keys: Iterable[str | bytes] = (),
    dbs: Iterable[int] | None = None,
    types: Iterable[str] | None = None,
    exclude_commands: Iterable[str] = (),
) -> FilterSpec:
    """A checked :class:`FilterSpec` (patterns given as text are encoded as UTF-8, with
    ``surrogateescape`` for bytes that are not; every list sorted and without repeats, so
    filters that differ in order only are equal; a key that several ``exclude_keys`` match
    is counted under the first of them in that order).

    Raises:
        InvalidArgumentError: a pattern Redis would not read the same way (an unclosed
            ``[``, a trailing ``\\``), an empty ``dbs`` or ``types``, a db outside 0..15 or a
            type that is not a Redis type, ``types`` keeping ``zset`` but not ``set``, or
            an ``exclude_commands`` name that is no write command moonish implements, or one
            that can change keys of several shards at once (``RENAME``, ``SUNIONSTORE``, ...:
            their changes cannot be replayed shard by shard).
    """
    include = tuple(sorted({pattern_bytes(p) for p in include_keys}))
    exclude = tuple(sorted({pattern_bytes(p) for p in exclude_keys}))
    kept_dbs = None if dbs is None else tuple(sorted(set(dbs)))
    if kept_dbs is not None and (not kept_dbs or not all(0 <= db <= 15 for db in kept_dbs)):
        raise InvalidArgumentError(f"dbs must name one or more of 0..15, not {list(kept_dbs)}")
    kept_types = None if types is None else tuple(sorted(set(types)))
    if kept_types is not None:
        unknown = [kind for kind in kept_types if kind not in TYPES]
        if unknown or not kept_types:
            raise InvalidArgumentError(
                f"types must name one or more of {', '.join(TYPES)}, not {list(kept_types)}"
            )
        if ZSET in kept_types and SET not in kept_types:
            raise InvalidArgumentError(
                "types keeps zset but not set: ZUNIONSTORE, ZINTERSTORE and ZDIFFSTORE read "
                "sets into sorted sets, whose values moonish could then not compute; keep set "
                "too (docs/filters.md)"
            )
    commands = tuple(sorted({name.upper() for name in exclude_commands}))
    for name in commands:
        found = COMMANDS.get(name.encode())
        if found is None:
            raise InvalidArgumentError(
                f"exclude_commands: {name!r} is no write command moonish implements"
            )
        if not (found[1] == [1] or name.encode() in PER_SHARD):
            raise InvalidArgumentError(
                f"exclude_commands: {name} can change keys of several shards at once, whose "
                "changes moonish logs as the keys' new values, not as the command: they "
                "cannot be left out and replayed shard by shard (docs/filters.md)"
            )
    return FilterSpec(include, exclude, kept_dbs, kept_types, commands)


class KeyFilter:
    """A :class:`FilterSpec` compiled, with the counts of what it left out.

    Attributes:
        spec: the spec.
        counts: commands left out in whole or in part, by rule (``exclude_keys:<pattern>``,
            ``include_keys``, ``dbs``, ``types:<type>``; a command counts once per rule), and
            keys left out of loads (RDB files, full resyncs) as ``keys:<rule>``.
    """

    def __init__(self, spec: FilterSpec) -> None:
        self.spec = spec
        self._include = KeyPatterns(spec.include_keys)
        self._exclude = KeyPatterns(spec.exclude_keys)
        self._rules = ["exclude_keys:" + pattern_text(p) for p in spec.exclude_keys]
        self._by_keys = bool(self._include or self._exclude)
        self._dbs = None if spec.dbs is None else frozenset(spec.dbs)
        self._types = None if spec.types is None else frozenset(spec.types)
        self.counts: Counter[str] = Counter()
        self._counting = True
        self._silenced = frozenset(name.encode() for name in spec.exclude_commands)

    def key_rule(self, key: bytes) -> str | None:
        """The rule that leaves ``key`` out by its name, or ``None`` when it is kept."""
        if not self._by_keys:
            return None
        if self._include and not self._include.any(key):
            return INCLUDE_RULE
        index = self._exclude.first(key)
        return None if index is None else self._rules[index]

    def entries(
        self, entries: Iterable[tuple[int, bytes, Entry]]
    ) -> Iterator[tuple[int, bytes, Entry]]:
        """The ``(db, key, entry)`` of ``entries`` (an RDB file's keys) the filter keeps,
        in order; the others counted in :attr:`counts` (``keys:<rule>``)."""
        dbs, types, counts = self._dbs, self._types, self.counts
        for item in entries:
            db, key, entry = item
            if dbs is not None and db not in dbs:
                rule = "dbs"
            elif (rule := self.key_rule(key)) is None:  # type: ignore[assignment]
                if types is None or entry.type in types:
                    yield item
                    continue
                rule = "types:" + entry.type
            counts["keys:" + rule] += 1
            count_filtered("keys:" + rule)

    def command(
        self,
        db: int,
        argv: list[bytes],
        holds: Callable[[int, bytes], bool] | None = None,
        *,
        path: str = "",
        offset: int | None = None,
        count: bool = True,
    ) -> list[bytes] | None:
        """What to run of ``argv`` in ``db``: ``argv`` itself, a command cut down to its kept
        part, or ``None`` (left out); counted in :attr:`counts` when ``count`` (a capture's
        workers count each command in one of them).

        Args:
            holds: whether moonish's keyspace holds ``(db, key)``; needed with ``types``.
            path, offset: where the command was read, named in errors.

        Raises:
            FilterConflictError: a kept key's new value depends on a key left out.
            UnsupportedFormatError: a command moonish does not implement (from ``keys_of``).
        """
        self._counting = count
        name = argv[0].upper()
        if name in (b"FLUSHALL", b"FUNCTION"):
            return argv
        dbs = self._dbs
        if dbs is not None:
            moved = _db_argument(name, argv)
            if moved is not None or name == b"SWAPDB":
                across = self._across_dbs(db, name, argv, moved, path, offset)
                if across is not argv:
                    return across
            elif db not in dbs:
                self._count("dbs")
                return None
        if name == b"FLUSHDB":
            return argv
        if self._types is not None:
            typed = self._by_type(db, name, argv, holds, path, offset)
            if typed is not argv:
                return typed
        if not self._by_keys:
            return argv
        keys = keys_of(argv)
        rules = [self.key_rule(key) for key in keys]
        if not any(rules):
            if name == b"SORT" and len(keys) > 1 and reads_patterns(argv):
                raise _conflict(argv, "SORT BY/GET may read keys left out", path, offset)
            return argv
        for rule in dict.fromkeys(rule for rule in rules if rule):
            self._count(rule)
        if all(rules):
            return None
        kept = [key for key, rule in zip(keys, rules, strict=True) if rule is None]
        return _kept_part(name, argv, keys, kept, path, offset)

    def silences(self, argv: list[bytes], count: bool = True) -> bool:
        """Whether ``argv``'s changes are left out of the stream (``exclude_commands``; the
        keyspace still runs it); counted (``exclude_commands:<NAME>``) when ``count``."""
        if not self._silenced:
            return False
        name = argv[0].upper()
        if name not in self._silenced:
            return False
        self._counting = count
        self._count("exclude_commands:" + name.decode())
        return True

    def _count(self, rule: str) -> None:
        if self._counting:
            self.counts[rule] += 1
            count_filtered(rule)

    def _across_dbs(
        self,
        db: int,
        name: bytes,
        argv: list[bytes],
        moved: int | None,
        path: str,
        offset: int | None,
    ) -> list[bytes] | None:
        """``SWAPDB a b``, ``MOVE key db``, ``COPY ... DB db`` under a ``dbs`` filter."""
        dbs = self._dbs
        assert dbs is not None
        if name == b"SWAPDB":
            pair = [_int(arg) for arg in argv[1:3]]
            kept = [x in dbs for x in pair]
        else:
            pair, kept = [db, moved if moved is not None else db], [db in dbs, moved in dbs]
        if all(kept):
            return argv
        run: list[bytes] | None = None
        if name == b"MOVE" and kept[0]:
            run = [b"DEL", argv[1]]  # gone from a kept db into one left out
        elif any(kept) and not (name == b"COPY" and kept[0]):  # (COPY: the source stays)
            raise _conflict(argv, f"db {pair[kept.index(False)]} is left out (dbs)", path, offset)
        self._count("dbs")
        return run

    def _by_type(
        self,
        db: int,
        name: bytes,
        argv: list[bytes],
        holds: Callable[[int, bytes], bool] | None,
        path: str,
        offset: int | None,
    ) -> list[bytes] | None:
        """``argv`` when the types filter has nothing to say, else what to run instead."""
        types = self._types
        assert types is not None
        kind = TYPE_OF.get(name)
        if name in (b"RESTORE", b"RESTORE-ASKING") and len(argv) > 3 and argv[3]:
            kind = _payload_type(argv[3][0])
        if name == b"SORT":
            if len(keys_of(argv)) < 2:
                return argv  # without STORE it writes nothing
            kind = LIST
            if LIST in types and (
                (reads_patterns(argv) and set(TYPES) - types)
                or (not {SET, ZSET} <= types and holds is not None and not holds(db, argv[1]))
            ):
                why = "SORT ... STORE may read keys of a type left out"
                raise _conflict(argv, why, path, offset)
        if kind is not None:
            if kind in types:
                return argv
            self._count("types:" + kind)
            written = _written(name, argv)
            return [b"DEL", *written] if written else None
        if name in (b"RENAME", b"RENAMENX", b"COPY", b"MOVE") and len(argv) > 2:
            if holds is None:
                raise InvalidArgumentError("a types filter needs the keyspace (holds)")
            if not holds(db, argv[1]):  # a key of a type left out
                self._count("types")
                options = {arg.upper() for arg in argv[3:]}
                if name == b"COPY" and b"REPLACE" in options and b"DB" in options:
                    why = "it may replace a key of another db with a key of a type left out"
                    raise _conflict(argv, why, path, offset)
                replace = name == b"RENAME" or (name == b"COPY" and b"REPLACE" in options)
                return [b"DEL", argv[2]] if replace else None
        return argv


def _kept_part(
    name: bytes,
    argv: list[bytes],
    keys: list[bytes],
    kept: list[bytes],
    path: str,
    offset: int | None,
) -> list[bytes] | None:
    """The part of ``argv`` that concerns only ``kept`` (some, not all, of ``keys``)."""
    if name in INDEPENDENT:
        if name in (b"MSET", b"MSETNX"):
            pairs = dict(zip(argv[1::2], argv[2::2], strict=True))
            return [argv[0], *[x for key in kept for x in (key, pairs[key])]]
        return [argv[0], *kept]
    if name in SOURCE_FIRST:
        source, destination = keys[0], keys[1]
        if source in kept:  # the destination is left out
            return _source_part(name, argv)
        if name == b"SMOVE":  # the move happened (Redis propagates no other SMOVE)
            return [b"SADD", destination, argv[3]]
        raise _conflict(argv, f"its source {source!r} is left out", path, offset)
    if name in DESTINATION_FIRST:
        if keys[0] not in kept:
            return None  # the sources do not change
        left_out = [key for key in keys[1:] if key not in kept]
        raise _conflict(argv, f"its source(s) {left_out!r} are left out", path, offset)
    raise _conflict(argv, "its keys are partly left out", path, offset)


def _source_part(name: bytes, argv: list[bytes]) -> list[bytes] | None:
    """What a source→destination command does to its source alone."""
    if name in (b"RENAME", b"RENAMENX"):
        return [b"DEL", argv[1]]
    if name == b"SMOVE":
        return [b"SREM", argv[1], argv[3]]
    if name == b"RPOPLPUSH":
        return [b"RPOP", argv[1]]
    if name == b"LMOVE":
        return [b"LPOP" if argv[3].upper() == b"LEFT" else b"RPOP", argv[1]]
    return None  # COPY, SORT ... STORE, GEORADIUS ... STORE: the source does not change


def _written(name: bytes, argv: list[bytes]) -> list[bytes]:
    """The keys a command of a type left out writes (each becomes a ``DEL``)."""
    keys = keys_of(argv)
    if name in DESTINATION_FIRST or name in (b"SORT", b"GEORADIUS", b"GEORADIUSBYMEMBER"):
        return keys[:1] if name in DESTINATION_FIRST else keys[1:]
    return keys


def _payload_type(rdb_type: int) -> str | None:
    """The Redis type of a DUMP payload whose first byte is ``rdb_type`` (its RDB value type,
    ``rdb.h``), or ``None`` for one moonish does not read (RESTORE then refuses it)."""
    name = TYPE_NAMES.get(rdb_type, "")
    first = name.split(" ", 1)[0]
    return first if first in TYPES else None


def _db_argument(name: bytes, argv: list[bytes]) -> int | None:
    """The other db of ``MOVE key db`` or ``COPY src dst DB db``, else ``None``."""
    if name == b"MOVE" and len(argv) > 2:
        return _int(argv[2])
    if name == b"COPY":
        for i in range(3, len(argv) - 1):
            if argv[i].upper() == b"DB":
                return _int(argv[i + 1])
    return None


def _int(arg: bytes) -> int:
    try:
        return int(arg)
    except ValueError:
        return -1


def _conflict(
    argv: Sequence[bytes], why: str, path: str, offset: int | None
) -> FilterConflictError:
    command = b" ".join(argv[:4]).decode(errors="replace")
    return FilterConflictError(
        f"cannot apply {command!r} under this filter: {why}, so the value of a key it keeps "
        "cannot be known; change the filter so that both are kept or both left out "
        "(docs/filters.md)",
        path=path or None,
        offset=offset,
    )


def filtered_counts(key_filter: KeyFilter) -> Counter[str]:
    """A copy of what ``key_filter`` left out: commands by rule, loaded keys as
    ``keys:<rule>``."""
    return Counter(key_filter.counts)
