"""Frames as Arrow record batches of flat change rows, without a JSON round trip.

The row shape is ``CHANGE_COLUMNS`` (docs/spark.md has every column). A kv_change record's
before/after images are stored as JSON by the writer: they become the ``before``/``after``
strings as stored; key, db, op, command and flags come from the binary header. Records
written while the shard's stream was off are not change events and give no row (as in
``moonish.read``). Imports pyarrow only.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
import pyarrow as pa

from moonish.cdc.events import op_of
from moonish.cdc.images import command_image, omitted_out
from moonish.errors import CorruptionError
from moonish.log.format import FLAG_BATCH, RecordType
from moonish.log.frames import Frame
from moonish.log.payloads import change_fields, decode_payload
from moonish.log.records import (
    CHANGE_EXPIRED,
    Checkpoint,
    KvChange,
    KvCommand,
    Message,
    PayloadError,
    Record,
    TemporalUpsert,
)
from moonish.log.segment import segment_holding

CHANGE_COLUMNS = (
    "shard INT NOT NULL, lsn BIGINT NOT NULL, op STRING NOT NULL, commit_ts TIMESTAMP NOT NULL, "
    "record_type STRING NOT NULL, command STRING, db INT, key BINARY, expired BOOLEAN NOT NULL, "
    "transaction_id STRING, before STRING, after STRING"
)
"""The flat change row as a Spark DDL schema (both ingestion paths give it)."""

ARROW_SCHEMA = pa.schema(
    [
        pa.field("shard", pa.int32(), nullable=False),
        pa.field("lsn", pa.int64(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("commit_ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("record_type", pa.string(), nullable=False),
        pa.field("command", pa.string()),
        pa.field("db", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("expired", pa.bool_(), nullable=False),
        pa.field("transaction_id", pa.string()),
        pa.field("before", pa.string()),
        pa.field("after", pa.string()),
    ]
)
"""``CHANGE_COLUMNS`` as an Arrow schema (commit_ts in microseconds, UTC)."""

_KV_CHANGE = int(RecordType.KV_CHANGE)
_MESSAGE_TYPES = frozenset({int(RecordType.CHECKPOINT), int(RecordType.MESSAGE)})
_RECORD_TYPES = {int(t): t.name.lower() for t in RecordType}
_OPS = {ord(op): op for op in "cudr"}


def change_batch(
    shard: int, frames: Sequence[Frame], path: str, messages: bool = False
) -> pa.RecordBatch:
    """The change rows of ``frames`` (one shard, LSN order) as one Arrow record batch;
    checkpoints and message records (``op: "m"``) only with ``messages``.

    Text columns are handed to Arrow as the stored UTF-8 bytes (Arrow checks them), so no
    Python ``str`` is made per row for them.

    Raises:
        CorruptionError: a payload does not follow its grammar, or its command name or an
            image is not UTF-8 (``path``, offset and LSN of the record).
    """
    lsns: list[int] = []
    ops: list[str] = []
    times: list[int] = []
    types: list[str] = []
    commands: list[bytes | str | None] = []
    dbs: list[int | None] = []
    keys: list[bytes | None] = []
    expired: list[bool] = []
    txns: list[str | None] = []
    befores: list[bytes | str | None] = []
    afters: list[bytes | str | None] = []
    add_lsn, add_op, add_time, add_type = lsns.append, ops.append, times.append, types.append
    add_command, add_db, add_key, add_expired = (
        commands.append,
        dbs.append,
        keys.append,
        expired.append,
    )
    add_txn, add_before, add_after = txns.append, befores.append, afters.append
    for lsn, rtype, flags, bidx, _, commit_us, payload, offset in frames:
        try:
            if rtype == _KV_CHANGE:
                op, cflags, view, db, command, key, before, after = change_fields(payload)
                if not view:
                    continue  # written with the stream off: not a change event
                add_op(_OPS[op])
                add_command(command.upper())
                add_db(db)
                add_key(key)
                add_expired((cflags & CHANGE_EXPIRED) != 0)
                if b'"_omitted_length"' in before:  # as envelopes carry it
                    before = omitted_out(before)
                if b'"_omitted_length"' in after:
                    after = omitted_out(after)
                add_before(before or None)
                add_after(after or None)
            else:
                record = decode_payload(rtype, payload)
                if rtype in _MESSAGE_TYPES and not messages:
                    continue  # not a change event, and not asked for
                op_, command_, db_, key_, before_, after_ = _plain_row(record)
                add_op(op_)
                add_command(command_)
                add_db(db_)
                add_key(key_)
                add_expired(False)
                add_before(before_)
                add_after(after_)
        except PayloadError as error:
            raise CorruptionError(
                f"undecodable record payload: {error}",
                path=segment_holding(path, lsn),
                offset=offset,
                lsn=lsn,
            ) from None
        add_lsn(lsn)
        add_time(commit_us)
        add_type(_RECORD_TYPES[rtype])
        add_txn(f"{shard}:{lsn - bidx}" if flags & FLAG_BATCH else None)
    try:
        texts = [pa.array(column, pa.string()) for column in (commands, befores, afters)]
    except pa.ArrowInvalid:
        raise _not_utf8(frames, path) from None
    columns = [
        pa.array([shard] * len(lsns), pa.int32()),
        pa.array(lsns, pa.int64()),
        pa.array(ops, pa.string()),
        pa.array(times, pa.timestamp("us", tz="UTC")),
        pa.array(types, pa.string()),
        texts[0],
        pa.array(dbs, pa.int32()),
        pa.array(keys, pa.binary()),
        pa.array(expired, pa.bool_()),
        pa.array(txns, pa.string()),
        texts[1],
        texts[2],
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _not_utf8(frames: Sequence[Frame], path: str) -> CorruptionError:
    """The error for the first kv_change record of ``frames`` whose command or images are
    not UTF-8 (Arrow refused one of them)."""
    for frame in frames:
        if frame.record_type == _KV_CHANGE:
            _, _, _, _, command, _, before, after = change_fields(frame.payload)
            try:
                command.decode(), before.decode(), after.decode()
            except UnicodeDecodeError as error:
                return CorruptionError(
                    f"undecodable record payload: {error}",
                    path=segment_holding(path, frame.lsn),
                    offset=frame.offset,
                    lsn=frame.lsn,
                )
    raise AssertionError("Arrow refused text that decodes as UTF-8")


def _plain_row(
    record: Record,
) -> tuple[str, str | None, int | None, bytes | None, str | None, str | None]:
    """``(op, command, db, key, before, after)`` of a plain kv, temporal, graph, checkpoint or
    message record: the command-shaped image of docs/envelopes.md ("Plain kv records"); a
    checkpoint has none, a message only its db."""
    op = op_of(record)
    if isinstance(record, Message):
        return op, None, record.db, None, None, None
    if isinstance(record, Checkpoint | KvChange):
        return op, None, None, None, None, None
    image = command_image(record)
    if isinstance(record, KvCommand):
        db, key = record.db, record.argv[record.key_pos] if record.key_pos else None
    else:
        db, key = None, record.key if isinstance(record, TemporalUpsert) else record.entity_id
    text = orjson.dumps(image).decode()
    deleted = op == "d"
    return op, image["command"], db, key, text if deleted else None, None if deleted else text
