"""A shard's keyspace (per Redis db index), expiry, and the per-command view commands run on.

Commands never touch a :class:`Keyspace` directly: they run on an :class:`Access`, which

- applies expiry lazily, as Redis does on access: a key whose ``expire_at_ms`` is at or before
  the command's time is removed first and reported in :attr:`Access.expired` (when loading,
  as a replica or an AOF load, it stays and is noted in :attr:`Access.overdue` instead); a
  hash field that a command looks up (:meth:`Access.hash_field`) and finds expired likewise,
  in :attr:`Access.expired_fields` (moonish.state.fieldttl);
- remembers, for every key the command looks at, whether it existed and (when asked) its image
  before the command, so the writer can say ``c``/``u``/``d`` and give before images;
- records which keys the command wrote, in order.

Handlers check everything that can fail before they change anything, so a refused command
leaves the keyspace as it was (only lazy expiry, which Redis also performs, may have happened).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterator
from typing import Final

from moonish.errors import CommandError
from moonish.log.records import Message
from moonish.slots import hash_slot
from moonish.state.fieldttl import expire_fields, is_expired, next_expiry
from moonish.state.libraries import Libraries
from moonish.values.model import HASH, STREAM, STRING, Entry, full_image

_KEPT_WHEN_EMPTY: Final = frozenset({STRING, STREAM})  # Redis keeps "" and an empty stream
_ABSENT: Final = (False, None)  # Access.before of a key that did not exist
WRONGTYPE: Final = "WRONGTYPE Operation against a key holding the wrong kind of value"

Key = tuple[int, bytes]
"""(db, key)."""


class Keyspace:
    """The keys of one shard: ``dbs[db][key] -> Entry``, plus heaps of the expiry times of
    keys and of hash fields.

    Attributes:
        slots: the hash slots a command that runs over every key (``FLUSHALL``, ``FLUSHDB``,
            ``SWAPDB``) reaches, or ``None``: every key. A Redis Cluster node's command
            reaches only the keys of the slots it serves; a cluster capture sets the node's
            slots before its commands run (moonish.redis.cluster).
    """

    def __init__(self) -> None:
        self.dbs: dict[int, dict[bytes, Entry]] = {}
        self.slots: Container[int] | None = None
        self._expiry: list[tuple[int, int, bytes]] = []  # (expire_at_ms, db, key), lazy
        self._field_expiry: list[tuple[int, int, bytes]] = []  # (a field's time, db, key)

    def get(self, db: int, key: bytes) -> Entry | None:
        keys = self.dbs.get(db)
        return None if keys is None else keys.get(key)

    def put(self, db: int, key: bytes, entry: Entry) -> None:
        keys = self.dbs.get(db)
        if keys is None:
            keys = self.dbs[db] = {}
        keys[key] = entry
        if entry.expire_at_ms is not None:
            heapq.heappush(self._expiry, (entry.expire_at_ms, db, key))
        if entry.field_expire_at_ms is not None:
            self.note_field_expiry(db, key, next_expiry(entry))

    def remove(self, db: int, key: bytes) -> None:
        keys = self.dbs.get(db)
        if keys is not None:
            keys.pop(key, None)
            if not keys:
                del self.dbs[db]

    def note_expiry(self, db: int, key: bytes, entry: Entry) -> None:
        """Remember ``entry``'s expiry time for the active sweep (call after setting it)."""
        if entry.expire_at_ms is not None:
            heapq.heappush(self._expiry, (entry.expire_at_ms, db, key))

    def note_field_expiry(self, db: int, key: bytes, expire_at_ms: int | None) -> None:
        """Remember that a field of hash ``key`` expires at ``expire_at_ms`` (the sweep looks
        at the hash then; :meth:`fields_due`)."""
        if expire_at_ms is not None:
            heapq.heappush(self._field_expiry, (expire_at_ms, db, key))

    def fields_due(self, now_ms: int) -> Iterator[tuple[Key, Entry]]:
        """Hashes with a field whose time is at or before ``now_ms``, soonest first, each
        once. The caller removes those fields before the next one is yielded, and notes the
        hash's next field time if it keeps any (:meth:`note_field_expiry`)."""
        heap, seen = self._field_expiry, set()
        while heap and heap[0][0] <= now_ms:
            _, db, key = heapq.heappop(heap)
            entry = self.get(db, key)
            if entry is None or entry.type != HASH or (db, key) in seen:
                continue
            soonest = next_expiry(entry)
            if soonest is not None and soonest <= now_ms:
                seen.add((db, key))
                yield (db, key), entry

    def due(self, now_ms: int) -> Iterator[Key]:
        """Keys whose expiry time is at or before ``now_ms``, soonest first (each once)."""
        heap = self._expiry
        while heap and heap[0][0] <= now_ms:
            _, db, key = heapq.heappop(heap)
            entry = self.get(db, key)
            at = None if entry is None else entry.expire_at_ms
            if at is not None and at <= now_ms:
                yield db, key

    def items(self) -> Iterator[tuple[int, bytes, Entry]]:
        """Every key, by db then key bytes."""
        for db in sorted(self.dbs):
            keys = self.dbs[db]
            for key in sorted(keys):
                yield db, key, keys[key]

    def __len__(self) -> int:
        return sum(map(len, self.dbs.values()))


class Access:
    """What one command (or one transaction) sees of the keyspace.

    Args:
        resolve: the keyspace that holds a key (one shard's, or the right shard's when a
            command spans shards).
        now_ms: the command's time, ms since the Unix epoch (expiry, relative TTLs, stream IDs).
        expire: live semantics: lazy expiry on access, and a past expiry time removes the
            key. Off when loading an AOF, as Redis loads one (the sweep expires keys after).
        images: keep each touched key's image before the command (for OLD views).
        max_value_bytes: the image size limit for those before images.
    """

    __slots__ = (
        "before",
        "by_value",
        "expire",
        "expired",
        "expired_fields",
        "home",
        "images",
        "keyspaces",
        "libraries",
        "log_argv",
        "max_value_bytes",
        "messages",
        "now_ms",
        "overdue",
        "resolve",
        "written",
    )

    def __init__(
        self,
        resolve: Callable[[bytes], Keyspace],
        now_ms: int,
        *,
        expire: bool = True,
        images: bool = False,
        max_value_bytes: int | None = None,
    ) -> None:
        self.resolve = resolve
        self.home: Keyspace | None = None
        """The one keyspace every key is in, when it is so (one shard's writer sets it): read
        directly instead of calling ``resolve`` per key."""
        self.keyspaces: list[Keyspace] = []
        """Every keyspace the command may reach (FLUSHDB, FLUSHALL); set by the caller."""
        self.log_argv: list[bytes] | None = None
        """The argv to log instead of the one received (SPOP is logged as SREM)."""
        self.by_value = False
        """Log the keys written by value (``Replay.STATE``), not the command: set by commands
        whose arguments need more than the keyspace to replay (RESTORE's DUMP payload)."""
        self.libraries: Libraries | None = None
        """The shard's function libraries (``moonish.state.libraries.Libraries``), or ``None``
        where FUNCTION cannot run; set by the caller."""
        self.messages: list[Message] = []
        """Message records the command appends besides its key changes (FUNCTION)."""
        self.now_ms = now_ms
        self.expire = expire
        self.images = images
        self.max_value_bytes = max_value_bytes
        self.before: dict[Key, tuple[bool, bytes | None]] = {}
        """Per touched key: (existed before, its image before or None)."""
        self.written: dict[Key, None] = {}
        """Keys written, in order of first write."""
        self.expired: list[tuple[int, bytes, Entry]] = []
        """Keys removed by lazy expiry, with their last entry."""
        self.overdue: set[Key] = set()
        """Keys touched whose expiry time had passed, kept because ``expire`` is off (a
        replica's or an AOF load's): a replica's writer marks the master's ``DEL`` or
        ``UNLINK`` of one as an expiry (``ShardWriter.live_source``)."""
        self.expired_fields: list[tuple[int, bytes, list[bytes], bytes, bytes | None]] = []
        """Hash fields removed by lazy expiry: (db, key, fields, the hash's image before, its
        image after or ``None`` when that removed the key), images made with
        ``max_value_bytes``."""

    def _keyspace(self, key: bytes) -> Keyspace:
        """The keyspace that holds ``key``: :attr:`home` when set, else ``resolve``'s."""
        home = self.home
        return home if home is not None else self.resolve(key)

    def reset(self, now_ms: int, expire: bool, images: bool, max_value_bytes: int | None) -> None:
        """Make this access new for another command, as constructed with these arguments
        (``keyspaces``, ``libraries`` and ``resolve`` stay): a writer reuses one access for
        its commands instead of making eight objects per command."""
        self.now_ms, self.expire = now_ms, expire
        self.images, self.max_value_bytes = images, max_value_bytes
        self.log_argv, self.by_value = None, False
        self.before.clear()
        self.written.clear()
        if self.messages:
            self.messages.clear()
        if self.expired:
            self.expired.clear()
        if self.overdue:
            self.overdue.clear()
        if self.expired_fields:
            self.expired_fields.clear()

    def _first_touch(self, db: int, key: bytes) -> Entry | None:
        keyspace = self._keyspace(key)
        keys = keyspace.dbs.get(db)
        entry = None if keys is None else keys.get(key)
        if entry is None:
            self.before[db, key] = _ABSENT
            return None
        at = entry.expire_at_ms
        if at is not None and at <= self.now_ms:
            if self.expire:
                keyspace.remove(db, key)
                self.expired.append((db, key, entry))
                self.before[db, key] = _ABSENT
                return None
            self.overdue.add((db, key))
        image = None
        if self.images:
            image = entry.image  # usually the previous write's after image
            if image is None or entry.image_limit != self.max_value_bytes:
                image = full_image(db, key, entry, self.max_value_bytes)
        self.before[db, key] = (True, image)
        return entry

    def get(self, db: int, key: bytes, type_: str | None = None) -> Entry | None:
        """The key's entry or ``None``.

        Raises:
            CommandError: ``WRONGTYPE`` when the key holds another type than ``type_``.
        """
        if (db, key) in self.before:
            keys = self._keyspace(key).dbs.get(db)
            entry = None if keys is None else keys.get(key)
        else:
            entry = self._first_touch(db, key)
        if entry is not None and type_ is not None and entry.type != type_:
            raise CommandError(WRONGTYPE)
        return entry

    def hash_field(
        self, db: int, key: bytes, entry: Entry | None, field: bytes
    ) -> tuple[bytes | None, Entry | None]:
        """A hash field's value as a command that looks it up sees it (``hashTypeGetValue``),
        and the hash (``None`` once its last field expired and the key went with it).

        A field whose time is before the command's is removed first, as Redis does
        (reported in :attr:`expired_fields`); when loading an AOF it reads as missing but
        stays (the sweep removes it after the load)."""
        if entry is None:
            return None, None
        value = entry.value.get(field)
        if value is None or not is_expired(entry, field, self.now_ms):
            return value, entry
        if not self.expire:
            return None, entry
        before, after = expire_fields(entry, db, key, [field], self.max_value_bytes)
        self.expired_fields.append((db, key, [field], before, after))
        if after is None:
            self._keyspace(key).remove(db, key)
            self.before[(db, key)] = (False, None)
            return None, None
        self.before[(db, key)] = (True, after if self.images else None)
        return None, entry

    def put(self, db: int, key: bytes, entry: Entry) -> None:
        """Set ``key`` to ``entry`` (a new value or a replaced one)."""
        if (db, key) not in self.before:
            self._first_touch(db, key)
        entry.stale()
        self._keyspace(key).put(db, key, entry)
        self.written[(db, key)] = None

    def put_string(
        self, db: int, key: bytes, value: bytes, expire_at_ms: int | None = None
    ) -> None:
        """``put(db, key, Entry(STRING, value, expire_at_ms))``, except that a key holding a
        string keeps its entry, updated in place (as INCR and APPEND update theirs): no new
        object per write, and no old one to free."""
        entry = self.get(db, key)
        if entry is None or entry.type != STRING:
            self.put(db, key, Entry(STRING, value, expire_at_ms))
            return
        entry.value = value
        entry.stale()
        if entry.expire_at_ms != expire_at_ms:
            entry.expire_at_ms = expire_at_ms
            self._keyspace(key).note_expiry(db, key, entry)
        self.written[(db, key)] = None

    def changed(self, db: int, key: bytes, entry: Entry, grew: int | None = None) -> None:
        """``entry`` (got from :meth:`get`) was changed in place; removes it when it is an
        empty container, as Redis does. ``grew``: by how many bytes its elements grew (see
        ``Entry.nbytes``), when the handler knows; otherwise the total is recounted when
        needed."""
        if entry.type not in _KEPT_WHEN_EMPTY and not entry.value:
            self.remove(db, key)
            return
        entry.stale()
        if grew is None:
            entry.nbytes = None
        elif entry.nbytes is not None:
            entry.nbytes += grew
        self.written[(db, key)] = None

    def keys(self, db: int | None) -> list[Key]:
        """Every key in ``db`` (every db when ``None``) of the reachable keyspaces (of their
        :attr:`Keyspace.slots` only, when set: the command's records then replay by value)."""
        found = []
        for keyspace in self.keyspaces:
            slots = keyspace.slots
            if slots is not None:  # a rebuild cannot run the command again: it has no slots
                self.by_value = True
            for number, keys in keyspace.dbs.items():
                if db is not None and number != db:
                    pass
                elif slots is None:
                    found += [(number, key) for key in keys]
                else:
                    found += [(number, key) for key in keys if hash_slot(key) in slots]
        return found

    def fields_changed(self, db: int, key: bytes, entry: Entry, noted_ms: int | None) -> None:
        """Only field expiry times of hash ``entry`` changed (HPEXPIREAT, HPERSIST);
        ``noted_ms``: a new time to remember for the sweep."""
        entry.stale(value=False)
        self._keyspace(key).note_field_expiry(db, key, noted_ms)
        self.written[(db, key)] = None

    def set_expiry(self, db: int, key: bytes, entry: Entry, expire_at_ms: int | None) -> None:
        entry.expire_at_ms = expire_at_ms
        entry.stale(value=False)
        self._keyspace(key).note_expiry(db, key, entry)
        self.written[(db, key)] = None

    def remove(self, db: int, key: bytes) -> None:
        if (db, key) not in self.before:
            self._first_touch(db, key)
        self._keyspace(key).remove(db, key)
        self.written[(db, key)] = None
