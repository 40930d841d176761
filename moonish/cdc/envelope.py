"""Encoding: change events as payload-only Debezium JSON envelopes (orjson).

Follows the value layout Debezium's Kafka Connect JsonConverter writes with
``schemas.enable=false`` (Debezium 3.x, "Data change events" in the connector docs), field order
included::

    {"before": {...}|null, "after": {...}|null,
     "source": {"version": "moonish-<v>", "connector": "moonish", "name": <name>,
                "ts_ms": <commit ms>, "ts_us": ..., "ts_ns": ...,
                "snapshot": "false"|"first"|"first_in_data_collection"|"true"|
                            "last_in_data_collection"|"last",
                "db": <Redis db index>|null, "shard": <id>, "lsn": <lsn>
                [, "command": <NAME>|null, "expired": <bool>]},
     "transaction": {"id": "<shard>:<first lsn>", "total_order": n,
                     "data_collection_order": n}|null,
     "op": "c"|"u"|"d"|"r"|"t", "ts_ms": <produced ms>, "ts_us": ..., "ts_ns": ...}

A kv_change record (and a snapshot row, ``op: "r"``) carries its before/after images already
as JSON (moonish.values.model); they are spliced in without parsing, and ``source`` gains
``command`` (upper-cased here: the log keeps the client's case) and ``expired``. Plain kv,
temporal and graph records get command-shaped images (docs/envelopes.md, "Plain kv records").

A checkpoint or a message record is not a data change: it is left out unless the encoder is
asked for messages (``messages=True``), and then shaped like Debezium's
logical-decoding message (``op: "m"``; Debezium's PostgreSQL connector, "Message events"): no
``before``/``after`` at all, a ``message`` block with ``prefix`` and base64 ``content``, and
``source.db`` the message's db (``null`` for a checkpoint). Byte strings that are not valid
UTF-8 become ``{"_b64": "<base64>"}`` (standard alphabet, padded, as Debezium's
``binary.handling.mode=base64``).
docs/envelopes.md has every field, with examples.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

import orjson

from moonish.cdc.events import (
    ROW_MARKS,
    SPECIAL_COMMANDS,
    EventBatch,
    kv_op,
    op_of,
    source_db_of,
)
from moonish.cdc.images import command_image, omitted_out, text_or_b64
from moonish.cdc.transactions import with_transactions
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import CorruptionError
from moonish.gcpolicy import paused_gc
from moonish.log.format import FLAG_BATCH, RecordType
from moonish.log.frames import Frame
from moonish.log.payloads import change_fields, decode_payload
from moonish.log.records import (
    CHANGE_EXPIRED,
    KV_HEAD,
    LENGTHS_STRUCTS,
    ROW_BITS,
    Checkpoint,
    KvChange,
    KvCommand,
    Message,
    PayloadError,
)
from moonish.log.segment import segment_holding
from moonish.values.model import is_plain
from moonish.version import __version__

try:  # the C encoder of kv_change envelopes (moonish/cdc/_cenvelope.c), absent in a pure build
    from moonish.cdc import _cenvelope

    _ENCODE_CHANGES: Callable[..., int] | None = _cenvelope.encode_changes
except ImportError:
    _ENCODE_CHANGES = None

CONNECTOR = "moonish"
SOURCE_VERSION = f"moonish-{__version__}"
CHECKPOINT_PREFIX = "moonish.checkpoint"
FLAG_SNAPSHOT = 0x80
"""Frame flag of a snapshot row (never stored in a WAL: rows are built from snapshot files);
``batch_index``/``batch_size`` give the row's position in the snapshot."""
_b64encode = base64.b64encode
_U32 = struct.Struct("<I")
_SNAPSHOT_MARK = {-1: b"first", 0: b"true", 1: b"last"}
_OP_ROW = ord("r")


def _stream_off(record_type: int, payload: bytes) -> bool:
    """A kv_change record written while the shard's stream was off (view byte 0)."""
    return record_type == RecordType.KV_CHANGE and len(payload) > 2 and payload[2] == 0


MESSAGE_TYPES = frozenset({RecordType.CHECKPOINT, RecordType.MESSAGE})
"""The record types whose envelopes are ``op: "m"`` messages (not data changes), left out
unless a reader asks for them (``messages=True``)."""


def is_change(record_type: int, payload: bytes) -> bool:
    """Whether a record is a change readers deliver: not a message or checkpoint (``op:
    "m"``), not a kv_change written while the stream was off (position markers are such)."""
    return record_type not in MESSAGE_TYPES and not _stream_off(record_type, payload)


class EnvelopeEncoder:
    """Decodes frames of one shard and encodes them as Debezium envelopes.

    Two paths give the same bytes (tests/cdc/test_encoder_matches_reference.py holds them to a
    reference):

    - the fast path, for kv records whose argument bytes are printable ASCII without ``"`` or
      ``\\`` (no JSON escaping needed, by far the common case): the envelope is one f-string
      of constant pieces (per encoder, and the processing time per call) and the record's fields;
    - the general path for everything else: decode the typed record, build the envelope as
      a dict, ``orjson.dumps`` it.

    Args:
        shard: the shard id (``source.shard``).
        name: the logical source name (``source.name``; Debezium's topic prefix).
        clock: the processing time stamped as top-level ``ts_ms``/``ts_us``/``ts_ns``, read
            once per ``encode`` call (all envelopes of one call share it).
        path: the shard directory; errors name the segment file in it that holds the record.
        transactions: also emit Debezium's BEGIN/END transaction records around atomic
            batches (ops ``"BEGIN"``/``"END"``; docs/envelopes.md, "Transactions").
        messages: also emit checkpoints and message records (``op: "m"``); without it they
            are passed over like records of a disabled stream (docs/envelopes.md,
            "Messages: op m").
        merged: the shard's part of a merged read over every shard: the rows of an RDB load
            are marked by the whole load's first and last rows, not the shard's
            (docs/envelopes.md, "Snapshot rows").
    """

    def __init__(
        self,
        shard: int,
        name: str = CONNECTOR,
        clock: Clock = SYSTEM_CLOCK,
        path: str = "",
        *,
        transactions: bool = False,
        messages: bool = False,
        merged: bool = False,
    ) -> None:
        self.shard = shard
        self.transactions = transactions
        self.messages = messages
        self.merged = merged
        self._row_marks = ROW_MARKS[merged]
        self.name = name
        self.clock = clock
        self.path = path
        self._pieces = self._constant_pieces()
        self._source_head = (
            ',"source":{"version":'
            + orjson.dumps(SOURCE_VERSION).decode()
            + ',"connector":"'
            + CONNECTOR
            + '","name":'
            + orjson.dumps(self.name).decode()
            + ',"ts_ms":'
        ).encode()

    def encode(self, frames: list[Frame]) -> EventBatch:
        """Change events for ``frames`` (in the order given), envelopes included.

        Raises:
            CorruptionError: a payload does not follow its record type's grammar (the frame's
                CRC was valid, so the writer that made it is broken or incompatible).
        """
        now_us = self.clock.now_us()
        ops: list[str] = []
        envelopes: list[bytes] = []
        with paused_gc():
            self._encode(frames, ops, envelopes, now_us)
            passed = len(envelopes) != len(frames)  # records passed over (not change events)
            if self.transactions:
                shown = [self._kind(f) for f in frames] if passed else None
                return with_transactions(self.shard, frames, ops, envelopes, shown)
            if passed:
                frames = [f for f in frames if self._kind(f)]
        return EventBatch(self.shard, frames, ops, envelopes)

    def _kind(self, frame: Frame) -> bool | None:
        """``True`` when ``frame``'s record has an event; ``False`` for a message left out
        (messages were not asked for); ``None`` for a record of a disabled stream."""
        if _stream_off(frame.record_type, frame.payload):
            return None
        return self.messages or frame.record_type not in MESSAGE_TYPES

    def encode_until_damage(
        self, frames: list[Frame]
    ) -> tuple[EventBatch, int, CorruptionError | None]:
        """Like :meth:`encode`, but damage does not lose the events before it.

        Returns:
            ``(batch, kept, error)``: the events of ``frames[:kept]`` and ``None`` when every
            frame encodes (``kept == len(frames)``); otherwise ``kept`` stops before the atomic
            batch that holds the first undecodable record (a batch is delivered whole or not
            at all) and ``error`` names that record (file, offset, LSN).
        """
        try:
            return self.encode(frames), len(frames), None
        except CorruptionError as error:
            damaged = next(
                (
                    i
                    for i, f in enumerate(frames)
                    if f.lsn == error.lsn and not f.flags & FLAG_SNAPSHOT
                ),
                0,
            )
            kept = max(0, damaged - frames[damaged].batch_index) if frames else 0
            return self.encode(frames[:kept]), kept, error

    def _damage(self, message: str, lsn: int, offset: int) -> CorruptionError:
        """A CorruptionError naming the segment that holds ``lsn`` (found only now: errors
        are rare, and the frames do not carry their segment)."""
        path = segment_holding(self.path, lsn) if self.path else self.path
        return CorruptionError(message, path=path, offset=offset, lsn=lsn)

    def _constant_pieces(self) -> dict[str, str]:
        """The text between the fields of a fast-path envelope (ops ``u``, ``d``) that is the
        same for every envelope of this encoder; the tails (processing time) come per call."""
        source = (
            ',"source":{"version":'
            + orjson.dumps(SOURCE_VERSION).decode()
            + ',"connector":"'
            + CONNECTOR
            + '","name":'
            + orjson.dumps(self.name).decode()
            + ',"ts_ms":'
        )
        return {
            "head_u": '{"before":null,"after":{"record_type":"kv","command":"',
            "head_d": '{"before":{"record_type":"kv","command":"',
            "db": '","db":',
            "key": ',"key":"',
            "args": '","args":["',
            "mid_u": '"]}' + source,
            "mid_d": '"]},"after":null' + source,
            "us": ',"ts_us":',
            "ns": ',"ts_ns":',
            "source_db": ',"snapshot":"false","db":',
            "lsn": f',"shard":{self.shard},"lsn":',
            "transaction": '},"transaction":',
            "txn_id": f'{{"id":"{self.shard}:',
            "txn_total": '","total_order":',
            "txn_order": ',"data_collection_order":',
        }

    def _encode(
        self, frames: list[Frame], ops: list[str], envelopes: list[bytes], now_us: int
    ) -> None:
        # Everything the loop touches is a local: this is the read path's hot loop.
        pieces = self._pieces
        head_u, head_d, mid_u, mid_d = (pieces[k] for k in ("head_u", "head_d", "mid_u", "mid_d"))
        tail = f'"ts_ms":{now_us // 1000},"ts_us":{now_us},"ts_ns":{now_us * 1000}}}'
        end_u, end_d = ',"op":"u",' + tail, ',"op":"d",' + tail
        p_db, p_key, p_args, p_us, p_ns = (pieces[k] for k in ("db", "key", "args", "us", "ns"))
        p_sdb, p_lsn, p_txn = pieces["source_db"], pieces["lsn"], pieces["transaction"]
        t_id, t_total, t_order = pieces["txn_id"], pieces["txn_total"], pieces["txn_order"]
        general, add_op, add_envelope = self._general, ops.append, envelopes.append
        kv_type, kv_head, special = RecordType.KV, KV_HEAD.unpack_from, SPECIAL_COMMANDS
        small_lengths, few = LENGTHS_STRUCTS, len(LENGTHS_STRUCTS)
        last_commit_us, us, ms, ns = None, "", "", ""
        change_type, change = RecordType.KV_CHANGE, self._change
        change_tail = tail.encode()
        skipped = frozenset() if self.messages else MESSAGE_TYPES
        encode_run, source_head, shard = _ENCODE_CHANGES, self._source_head, self.shard
        merged = self.merged
        i, count = 0, len(frames)
        while i < count:
            lsn, rtype, flags, bidx, bsize, commit_us, payload, offset = frames[i]
            if rtype == change_type and encode_run is not None:  # a run in one C call
                ran = encode_run(frames, i, ops, envelopes, source_head, change_tail, shard, merged)
                if ran > i:
                    i = ran
                    continue
            i += 1
            envelope = None
            if rtype == change_type:
                if len(payload) > 2 and payload[2] == 0:
                    self._check_skipped(lsn, payload, offset)
                    continue  # written while the stream was off: not a change event
                op, envelope = change(
                    lsn, flags, bidx, bsize, commit_us, payload, offset, change_tail
                )
                add_op(op)
                add_envelope(envelope)
                continue
            if rtype in skipped:
                self._check_message(lsn, rtype, payload, offset)
                continue  # not a change event, and not asked for
            if rtype == kv_type and len(payload) >= 8:
                db, key_pos, argc = kv_head(payload, 0)
                try:
                    text = payload[8 + 4 * argc :].decode("ascii")
                except UnicodeDecodeError:
                    text = ""  # not ASCII: the general path
                if (
                    0 < key_pos < argc < few
                    and text  # empty: too short for its length table, or all-empty argv
                    and text.isprintable()
                    and '"' not in text
                    and "\\" not in text
                ):
                    lengths = small_lengths[argc].unpack_from(payload, 8)
                    first = lengths[0]
                    # key and the arguments joined by '","', sliced from text; the usual
                    # arities are unrolled (INCR k / DEL k; SET k v / LPUSH k v / SADD k m)
                    if argc == 2:
                        key = joined = text[first:]
                        pos = first + lengths[1]
                    elif argc == 3:
                        pos = first + lengths[1]
                        key, second = text[first:pos], text[pos:]
                        joined = f'{key}","{second}'
                        if key_pos == 2:
                            key = second
                        pos += lengths[2]
                    else:
                        args, pos = [], first
                        for length in lengths[1:]:
                            args.append(text[pos : pos + length])
                            pos += length
                        key, joined = args[key_pos - 1], '","'.join(args)
                    if pos == len(text):  # else: the general path names the damage
                        command = text[:first].upper()
                        source_db: int | str = db
                        if command in special:
                            op = kv_op(command, key_pos)
                            if source_db_of(command, db) is None:
                                source_db = "null"
                        else:
                            op = "u"
                        if op == "u":
                            head, mid, end = head_u, mid_u, end_u
                        else:
                            head, mid, end = head_d, mid_d, end_d
                        if commit_us != last_commit_us:  # a batch shares one commit time
                            last_commit_us, us = commit_us, str(commit_us)
                            if commit_us >= 1000:  # ms and ns from the digits of us
                                ms, ns = us[:-3], us + "000"
                            else:
                                ms, ns = str(commit_us // 1000), str(commit_us * 1000)
                        if flags & FLAG_BATCH:
                            order = bidx + 1
                            txn = f"{t_id}{lsn - bidx}{t_total}{order}{t_order}{order}}}"
                        else:
                            txn = "null"
                        envelope = (
                            f"{head}{command}{p_db}{db}{p_key}{key}{p_args}{joined}{mid}{ms}"
                            f"{p_us}{us}{p_ns}{ns}{p_sdb}{source_db}{p_lsn}{lsn}{p_txn}"
                            f"{txn}{end}"
                        ).encode()
            if envelope is None:
                op, envelope = general(lsn, rtype, flags, bidx, commit_us, payload, offset, now_us)
            add_op(op)
            add_envelope(envelope)

    def _check_skipped(self, lsn: int, payload: bytes, offset: int) -> None:
        """A record written with the stream off is passed over, but only once it is known to
        follow its grammar (readers accept exactly what ``wal verify`` accepts)."""
        try:
            change_fields(payload)
        except PayloadError as exc:
            raise self._damage(f"undecodable record payload: {exc}", lsn, offset) from None

    def _check_message(self, lsn: int, rtype: int, payload: bytes, offset: int) -> None:
        """A message passed over is first checked against its grammar, as
        :meth:`_check_skipped` checks a record of a disabled stream."""
        try:
            decode_payload(rtype, payload)
        except PayloadError as exc:
            raise self._damage(f"undecodable record payload: {exc}", lsn, offset) from None

    def _change(
        self,
        lsn: int,
        flags: int,
        bidx: int,
        bsize: int,
        commit_us: int,
        payload: bytes,
        offset: int,
        tail: bytes,
    ) -> tuple[str, bytes]:
        """(op, envelope) of a kv_change record or a snapshot row: the images are spliced in
        as stored (the writer made them JSON), no JSON is parsed."""
        try:
            op_code, change_flags, _, db, command, _, before, after = change_fields(payload)
        except PayloadError as exc:
            raise self._damage(f"undecodable record payload: {exc}", lsn, offset) from None
        before, after = before or b"null", after or b"null"
        if b'"_omitted_length"' in before:
            before = omitted_out(before)
        if b'"_omitted_length"' in after:
            after = omitted_out(after)
        op = chr(op_code)
        snapshot = b"false"
        if flags & FLAG_SNAPSHOT:
            snapshot = _SNAPSHOT_MARK[(bidx == bsize - 1) - (bidx == 0 and bsize > 1)]
            transaction = b"null"
        elif op_code == _OP_ROW:  # a key an RDB load wrote to the log
            snapshot = self._row_marks[change_flags & ROW_BITS]
            transaction = b"null"
        elif flags & FLAG_BATCH:
            transaction = b'{"id":"%d:%d","total_order":%d,"data_collection_order":%d}' % (
                self.shard,
                lsn - bidx,
                bidx + 1,
                bidx + 1,
            )
        else:
            transaction = b"null"
        if not command:
            command_json = b"null"  # a snapshot row
        elif is_plain(command := command.upper()):  # one form, whatever case the client used
            command_json = b'"' + command + b'"'
        else:
            command_json = orjson.dumps(text_or_b64(command))
        expired = b"true" if change_flags & CHANGE_EXPIRED else b"false"
        envelope = b"".join(
            [
                b'{"before":',
                before,
                b',"after":',
                after,
                self._source_head,
                b'%d,"ts_us":%d,"ts_ns":%d,"snapshot":"%s","db":%d,"shard":%d,"lsn":%d,'
                b'"command":%s,"expired":%s},"transaction":%s,"op":"%s",'
                % (
                    commit_us // 1000,
                    commit_us,
                    commit_us * 1000,
                    snapshot,
                    db,
                    self.shard,
                    lsn,
                    command_json,
                    expired,
                    transaction,
                    op.encode(),
                ),
                tail,
            ]
        )
        return op, envelope

    def _general(
        self,
        lsn: int,
        rtype: int,
        flags: int,
        bidx: int,
        commit_us: int,
        payload: bytes,
        offset: int,
        now_us: int,
    ) -> tuple[str, bytes]:
        """(op, envelope) of any record: typed decode, a dict, ``orjson.dumps``."""
        try:
            record = decode_payload(rtype, payload)
        except PayloadError as exc:
            raise self._damage(f"undecodable record payload: {exc}", lsn, offset) from None
        if isinstance(record, KvChange):
            tail = f'"ts_ms":{now_us // 1000},"ts_us":{now_us},"ts_ns":{now_us * 1000}}}'
            return self._change(lsn, flags, bidx, 1, commit_us, payload, offset, tail.encode())
        op = op_of(record)
        db = None
        if isinstance(record, KvCommand):
            db = source_db_of(record.command.decode(errors="replace"), record.db)
        elif isinstance(record, Message):
            db = record.db
        source = {
            "version": SOURCE_VERSION,
            "connector": CONNECTOR,
            "name": self.name,
            "ts_ms": commit_us // 1000,
            "ts_us": commit_us,
            "ts_ns": commit_us * 1000,
            "snapshot": "false",
            "db": db,
            "shard": self.shard,
            "lsn": lsn,
        }
        transaction = (
            {
                "id": f"{self.shard}:{lsn - bidx}",
                "total_order": bidx + 1,
                "data_collection_order": bidx + 1,
            }
            if flags & FLAG_BATCH
            else None
        )
        if isinstance(record, Checkpoint | Message):
            if isinstance(record, Message):
                prefix, content = record.prefix, record.content
            else:
                prefix = CHECKPOINT_PREFIX
                content = orjson.dumps(
                    {"checkpoint_lsn": record.checkpoint_lsn, "label": record.label}
                )
            message = {"prefix": prefix, "content": _b64encode(content).decode("ascii")}
            envelope = {
                "op": op,
                "ts_ms": now_us // 1000,
                "source": source,
                "transaction": transaction,
                "message": message,
            }
            return op, orjson.dumps(envelope)
        image = command_image(record)
        before, after = {"u": (None, image), "d": (image, None)}.get(op, (None, None))
        envelope = {
            "before": before,
            "after": after,
            "source": source,
            "transaction": transaction,
            "op": op,
            "ts_ms": now_us // 1000,
            "ts_us": now_us,
            "ts_ns": now_us * 1000,
        }
        return op, orjson.dumps(envelope)
