"""Setting a shard's keys to given values: RDB loads and resynchronisations.

Commands are not the only way keys change. An RDB file (a user's snapshot, the base of an AOF,
the payload of a replica's full resync) says what every key *is*; moonish turns that into
records by comparing it with the shard's keyspace, key by key:

- ``rows=True`` (the shard's first load): every key the source has is written as an ``r`` row
  (Debezium's snapshot read), first and last rows marked; and the first and last rows of the
  whole load over every shard, when the caller knows them (:func:`load_order`);
- ``rows=False`` (a resync of a shard that already follows the source): only differences, as
  changes: ``c`` for a key the shard lacks, ``u`` for one whose type, value or expiry differs,
  and (:func:`remove_missing`) ``d`` for a key the source no longer has.

A key whose value already equals the source's is never written, so a load cut short (a crash,
a kill) and run again writes each key exactly once: the keys already written compare equal.
Every record replays as ``Replay.STATE`` (the key's lossless image).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from moonish.log.records import KvChange, Replay, ViewType, row_name
from moonish.state.keyspace import Keyspace
from moonish.state.shard import ShardWriter
from moonish.state.spread import AppendAt, RowOrder
from moonish.values.model import Entry, full_image, key_image, state_image

BATCH_RECORDS = 4096
"""Records appended per call while loading (each record alone: a load is not atomic)."""

Append = AppendAt
"""Appends records (each alone) with a source position on the last one (``b""``: none), at a
commit time of at least the third argument (µs; 0: the clock's); returns the commit time."""


def loader_for(writer: ShardWriter, command: bytes) -> Loader:
    """A :class:`Loader` on ``writer``'s keyspace with its stream configuration."""
    config = writer.stream
    return Loader(
        writer.keyspace,
        config.view,
        config.old_images,
        config.new_images,
        config.max_value_bytes,
        command,
    )


class Loader:
    """Builds the records that set keys of ``keyspace`` to new values, and applies them.

    Args:
        keyspace: the shard's keyspace (changed as records are built).
        view: the shard's stream view type; ``old_images``/``new_images`` and
            ``max_value_bytes`` as in its stream configuration.
        command: the ``source.command`` of the records (``b"RDB"``, ``b"PSYNC"``).
    """

    def __init__(
        self,
        keyspace: Keyspace,
        view: ViewType,
        old_images: bool,
        new_images: bool,
        max_value_bytes: int | None,
        command: bytes,
    ) -> None:
        self.keyspace = keyspace
        self.view, self.old, self.new = view, old_images, new_images
        self.limit, self.command = max_value_bytes, command

    def change(self, db: int, key: bytes, entry: Entry | None, *, row: bool) -> KvChange | None:
        """Set ``(db, key)`` to ``entry`` (``None``: remove it); the record saying so, or
        ``None`` when the key already is exactly that (type, value, expiry)."""
        current = self.keyspace.get(db, key)
        state = b"" if entry is None else state_image(db, key, entry)
        if current is None and entry is None:
            return None
        if current is not None and entry is not None and state_image(db, key, current) == state:
            return None
        before = after = b""
        if self.view is not ViewType.OFF:
            only_key = b"" if self.old and self.new else key_image(db, key)
            if current is not None and not row:
                before = full_image(db, key, current, self.limit) if self.old else only_key
            if entry is not None:
                after = full_image(db, key, entry, self.limit) if self.new else only_key
        if entry is None:
            self.keyspace.remove(db, key)
            op = "d"
        else:
            self.keyspace.put(db, key, entry)
            op = "r" if row else ("c" if current is None else "u")
        return KvChange(
            op, db, self.command, key, before, after, self.view, False, Replay.STATE, state
        )


def load_entries(
    loader: Loader,
    entries: Iterable[tuple[int, bytes, Entry]],
    append: Append,
    *,
    rows: bool,
    source: bytes = b"",
    load_first: bool = False,
    load_last: bool = False,
    order: RowOrder | None = None,
) -> int:
    """Set every ``(db, key, entry)`` of ``entries`` (keys not repeated) and append the
    records in batches of up to :data:`BATCH_RECORDS`; with ``rows`` the first and last
    ``r`` rows are marked (a load cut short and run again marks its first row again), and
    with ``load_first``/``load_last`` also as the first/last row of the whole load (its other
    shards' rows all come after/before these in commit-time order: :func:`load_order`), or,
    for a load that several processes write at once, as ``order`` decides
    (moonish.state.spread). Returns how many records were appended. ``source`` rides on the
    last record, so a load cut short carries no position and runs again.

    Raises:
        UnavailableError: with ``order``, not every process joined the load in time.
    """
    pending: list[KvChange] = []
    count = 0
    spread = order if rows else None
    floor_us = 0
    for db, key, entry in entries:
        change = loader.change(db, key, entry, row=rows)
        if change is None:
            continue
        if rows and count == 0 and not pending:
            change = change._replace(row=row_name(True, False, load_first))
        pending.append(change)
        if len(pending) > BATCH_RECORDS:
            if spread is not None and count == 0:
                spread.first(pending[:-1], append)
                floor_us = spread.floor_us
            else:
                append(pending[:-1], b"", floor_us)
            count += len(pending) - 1
            pending = pending[-1:]
    if pending and spread is not None:
        if len(pending) > 1:
            if count == 0:
                spread.first(pending[:-1], append)
            else:
                append(pending[:-1], b"", floor_us)
            count += len(pending) - 1
        spread.last(pending[-1], append, source, count == 0)
        return count + 1
    if pending:
        if rows:
            alone = bool(pending[-1].row)  # also the first row
            row = row_name(alone, True, load_first and alone, load_last)
            pending[-1] = pending[-1]._replace(row=row)
        append(pending, source, 0)
        count += len(pending)
    return count


def load_order(loads_rows: list[bool]) -> tuple[int | None, int | None]:
    """The shards that hold the first and the last row of a load whose shards are written
    one after another, in shard order, by one process; ``loads_rows[shard]``: the load writes
    ``r`` rows to that shard (it has keys, and has not finished a load). ``None`` when no
    shard does.

    A merged read orders records by commit time, then by shard: such a load's rows come in
    shard order, so its first row is the first shard's first and its last the last shard's
    last. (Shards loaded at once by several processes interleave by commit time: no shard's
    rows are known to come first or last; they agree through moonish.state.spread.)"""
    shards = [shard for shard, loads in enumerate(loads_rows) if loads]
    return (shards[0], shards[-1]) if shards else (None, None)


def remove_missing(loader: Loader, keep: Callable[[int, bytes], bool], append: Append) -> int:
    """``d`` records for every key of the loader's keyspace that ``keep`` says the source no
    longer has (a resync: keys deleted while moonish was not following); returns how many."""
    gone = [(db, key) for db, key, _ in loader.keyspace.items() if not keep(db, key)]
    for start in range(0, len(gone), BATCH_RECORDS):
        batch = [
            loader.change(db, key, None, row=False)
            for db, key in gone[start : start + BATCH_RECORDS]
        ]
        append([change for change in batch if change is not None], b"", 0)
    return len(gone)


def add_libraries(writer: ShardWriter, codes: list[bytes]) -> None:
    """Give ``writer`` the function libraries ``codes`` (one cluster node's FUNCTION2 items, a
    resync of its link) on top of those it holds (other nodes'; moonish.redis.cluster
    .functions): a library it lacks or holds with other code is loaded (``REPLACE``), as a
    ``moonish.function`` message; the others are kept.

    Raises:
        CommandError: a library Redis would refuse to load (a bad shebang).
    """
    held = set(writer.libraries.values())
    for code in codes:
        if code not in held:
            writer.load_function(code, replace=True)


def set_libraries(writer: ShardWriter, codes: list[bytes]) -> None:
    """Give ``writer`` exactly the function libraries ``codes`` (an RDB file's FUNCTION2
    items, a resync): ``FUNCTION FLUSH`` then a ``FUNCTION LOAD`` each, as
    ``moonish.function`` messages, only when they differ (run again: nothing is written).

    Raises:
        CommandError: a library Redis would refuse to load (a bad shebang, a name twice).
    """
    if sorted(writer.libraries.values()) == sorted(codes):
        return
    writer.execute(0, [b"FUNCTION", b"FLUSH"])
    for code in codes:
        writer.load_function(code)
