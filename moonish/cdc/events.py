"""Decoding: frames into typed change events, with the Debezium op each one stands for.

A kv_change record states its own op (``c``/``u``/``d``, from the writer's keyspace; ``r`` for
snapshot rows). The rules below are for plain kv records, written without keyspace state
(docs/envelopes.md explains them):

- ``d``: the record's key is gone: ``DEL``, ``UNLINK``, ``GETDEL``, and the source key of
  ``RENAME`` / ``RENAMENX``.
- ``t``: ``FLUSHDB`` / ``FLUSHALL`` (Debezium's truncate: the whole collection is emptied).
- ``m``: a checkpoint or a message record, which are not data changes (Debezium's
  logical-decoding message).
- ``u``: every other write, including ``HDEL``, ``SREM``, pops and expiry changes, which change
  the key but need not remove it (without the key's state nothing more can be said).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

from moonish.log.frames import Frame
from moonish.log.payloads import decode_payload
from moonish.log.records import (
    _ROW_FLAGS,
    CHANGE_FIRST_ROW,
    CHANGE_LAST_ROW,
    CHANGE_LOAD_FIRST,
    CHANGE_LOAD_LAST,
    Checkpoint,
    KvChange,
    KvCommand,
    Message,
    Record,
)

DELETE_COMMANDS = frozenset({"DEL", "UNLINK", "GETDEL"})
"""Commands that remove the key they name."""
SOURCE_DELETE_COMMANDS = frozenset({"RENAME", "RENAMENX"})
"""Commands that remove their first key (the source) and write their second."""
TRUNCATE_COMMANDS = frozenset({"FLUSHDB", "FLUSHALL"})
"""Commands that empty a whole database (or all of them)."""
SPECIAL_COMMANDS = DELETE_COMMANDS | SOURCE_DELETE_COMMANDS | TRUNCATE_COMMANDS
"""Every command whose op (or ``source.db``) is not the default for some key position."""


def row_mark(change_flags: int, merged: bool) -> bytes:
    """``source.snapshot`` of an RDB load's row: in a shard's own read, its shard's first and
    last rows are ``first`` and ``last``; in a merged read only the whole load's are, and its
    shard's are Debezium's ``first_in_data_collection`` and ``last_in_data_collection`` (a
    table's, in Debezium's snapshots). A last mark wins over a first (a row alone)."""
    if not merged:
        last, first = CHANGE_LAST_ROW, CHANGE_FIRST_ROW
        return b"last" if change_flags & last else b"first" if change_flags & first else b"true"
    for bit, mark in (
        (CHANGE_LOAD_LAST, b"last"),
        (CHANGE_LOAD_FIRST, b"first"),
        (CHANGE_LAST_ROW, b"last_in_data_collection"),
        (CHANGE_FIRST_ROW, b"first_in_data_collection"),
    ):
        if change_flags & bit:
            return mark
    return b"true"


ROW_MARKS = {
    merged: {bits: row_mark(bits, merged) for bits in _ROW_FLAGS.values()}
    for merged in (False, True)
}
"""``source.snapshot`` by the row bits of ``change_flags``, for shard reads and merged reads."""


class ChangeEvent(NamedTuple):
    """One record of a shard as a change event.

    Attributes:
        shard: the shard id.
        lsn: the record's LSN.
        op: the Debezium op: ``c``, ``u``, ``d``, ``r``, ``t`` or ``m`` (see the module
            docstring); ``BEGIN``/``END`` for transaction records read with
            ``transactions=True``.
        commit_us: commit time, microseconds since the Unix epoch.
        envelope: the payload-only Debezium JSON envelope, UTF-8, no trailing newline.
        record_type: the frame's record type (``RecordType``).
        payload: the record's payload bytes as stored.
    """

    shard: int
    lsn: int
    op: str
    commit_us: int
    envelope: bytes
    record_type: int
    payload: bytes

    @property
    def record(self) -> Record:
        """The typed record (``KvChange``, ``KvCommand``, ``TemporalUpsert``,
        ``GraphMutation``, ``Checkpoint`` or ``Message``), decoded on each access."""
        return decode_payload(self.record_type, self.payload)


class EventBatch(Sequence[ChangeEvent]):
    """The events of one read, in LSN order, stored by column.

    ``envelopes`` (bytes, one per event) is what NDJSON output needs; :class:`ChangeEvent`
    objects are built only when the batch is indexed or iterated, so writing envelopes costs
    no per-event object.
    """

    __slots__ = ("envelopes", "frames", "ops", "shard")

    def __init__(self, shard: int, frames: list[Frame], ops: list[str], envelopes: list[bytes]):
        self.shard = shard
        self.frames = frames
        self.ops = ops
        self.envelopes = envelopes

    def __len__(self) -> int:
        return len(self.envelopes)

    @overload
    def __getitem__(self, index: int) -> ChangeEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[ChangeEvent]: ...

    def __getitem__(self, index: int | slice) -> ChangeEvent | list[ChangeEvent]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        frame = self.frames[index]
        return ChangeEvent(
            self.shard,
            frame.lsn,
            self.ops[index],
            frame.commit_us,
            self.envelopes[index],
            frame.record_type,
            frame.payload,
        )

    def __iter__(self) -> Iterator[ChangeEvent]:
        shard = self.shard
        for frame, op, envelope in zip(self.frames, self.ops, self.envelopes, strict=True):
            yield ChangeEvent(
                shard, frame.lsn, op, frame.commit_us, envelope, frame.record_type, frame.payload
            )

    def __repr__(self) -> str:
        span = f"LSN {self.frames[0].lsn}..{self.frames[-1].lsn}" if self.frames else "empty"
        return f"EventBatch(shard={self.shard}, {span})"


def kv_op(command: str, key_pos: int) -> str:
    """The Debezium op for a kv command (upper-cased name) about ``argv[key_pos]``."""
    if command in DELETE_COMMANDS:
        return "d"
    if command in SOURCE_DELETE_COMMANDS:
        return "d" if key_pos == 1 else "u"
    if key_pos == 0 and command in TRUNCATE_COMMANDS:
        return "t"
    return "u"


def source_db_of(command: str, db: int) -> int | None:
    """``source.db`` of a kv record: its db, or ``None`` for ``FLUSHALL`` (all databases)."""
    return None if command == "FLUSHALL" else db


def op_of(record: Record) -> str:
    """The Debezium op code for ``record`` (see the module docstring)."""
    if isinstance(record, KvCommand):
        return kv_op(record.command.decode(errors="replace"), record.key_pos)
    if isinstance(record, Checkpoint | Message):
        return "m"
    if isinstance(record, KvChange):
        return record.op
    return "u"
