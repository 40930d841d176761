"""The payload encodings of the record types (the types are moonish.log.records, re-exported
here): what a frame holds after its header (moonish.log.format).

Payload grammar, little-endian, ``bytes(n)`` meaning ``len:u32`` followed by ``len`` bytes::

    kv         := db:u16 key_pos:u16 argc:u32 len:u32[argc] argv[0] .. argv[argc-1]
    temporal   := valid_from_ms:i64 system_from_ms:i64 bytes(key) bytes(value)
    graph      := entity_kind:u8 has_valid_to:u8 reserved:u16 valid_to_ms:i64
                  system_from_ms:i64 bytes(entity_id) bytes(properties)
    checkpoint := checkpoint_lsn:u64 bytes(label, UTF-8)
    kv_change  := op:u8 change_flags:u8 view:u8 replay:u8 db:u16 reserved:u16
                  bytes(command) bytes(key) bytes(before) bytes(after) bytes(state)
                  argc:u32 bytes(argv[0]) .. bytes(argv[argc-1])
                  [bytes(source)]            only with change_flags bit 2
    message    := db:u16 message_flags:u16 bytes(prefix, UTF-8) bytes(content)
                  [bytes(source)]            only with message_flags bit 0

A kv_change record says what a write did to one key, as the writer's keyspace saw it: ``op``
is ``c``, ``u``, ``d``, or ``r`` for a key loaded from an RDB file (ASCII); ``change_flags``
bit 0 marks a delete by expiry, bit 1 a record of an AOF import (replayed with Redis's loading
semantics), bit 2 a source position after argv (the import's or capture's position in its
source once this record is written: moonish.redis.routing.sources), bits 3 and 4 the first
and the last row of a shard in an RDB load, bits 5 and 6 the first and the last row of the
whole load over every shard (only with bit 3, bit 4 respectively); ``view`` is the stream
view type in force (``ViewType``; 0: the stream was off, readers skip the record);
``before``/``after`` are the images readers put in the envelope as they are (UTF-8 JSON,
empty for null); ``replay`` says how the writer rebuilds its keyspace from the log: ``1``
run ``argv`` (the whole command, once per command and shard), ``2`` set the key to ``state``
(a lossless image; empty: the key is gone), ``0`` nothing (another record of the same command
replays it). ``argv`` is empty unless ``replay`` is 1.

A message record is not a data change: ``prefix`` names what it is (``moonish.function``: a
change to the shard's function libraries, replayed by the writer; ``moonish.skipped``: a
command an import did not apply; docs/wal-format.md lists them) and ``content`` is opaque to the
log; ``db`` is the Redis database the command ran in.

A kv payload lists all argument lengths before the argument bytes, so a reader gets every length
with one ``struct`` call. ``key_pos`` is the index in ``argv`` of the key this record is about,
0 when the command has no key (FLUSHDB). A command that touches several keys is written as one
record per key, as an atomic batch, so every record says what happened to exactly one key.
"""

from __future__ import annotations

import struct
from typing import Final

from moonish.log.format import RecordType
from moonish.log.records import (
    _CHANGE_HEAD_AND_SIZE,
    _CHECKPOINT_HEAD,
    _GRAPH_HEAD,
    _MESSAGE_HEAD,
    _ROW_FLAGS,
    _ROW_NAMES,
    _SMALL,
    _TEMPORAL_HEAD,
    _U32,
    _U32_PACK,
    _U32_SMALL,
    CHANGE_EXPIRED,
    CHANGE_FIRST_ROW,
    CHANGE_LAST_ROW,
    CHANGE_LOAD_FIRST,
    CHANGE_LOAD_LAST,
    CHANGE_LOADING,
    CHANGE_SOURCE,
    KV_CHANGE_HEAD,
    KV_HEAD,
    LENGTHS_STRUCTS,
    MAX_DB,
    MESSAGE_SOURCE,
    ROW_BITS,
    Checkpoint,
    EntityKind,
    GraphMutation,
    KvChange,
    KvCommand,
    Message,
    PayloadError,
    Record,
    Replay,
    TemporalUpsert,
    ViewType,
    lengths_struct,
    position_marker,
)

__all__ = [  # the record types are defined in moonish.log.records, re-exported here
    "CHANGE_EXPIRED",
    "CHANGE_FIRST_ROW",
    "CHANGE_LAST_ROW",
    "CHANGE_LOAD_FIRST",
    "CHANGE_LOAD_LAST",
    "CHANGE_LOADING",
    "CHANGE_SOURCE",
    "Checkpoint",
    "EntityKind",
    "GraphMutation",
    "KNOWN_CHANGE_FLAGS",
    "KV_CHANGE_HEAD",
    "KV_HEAD",
    "KvChange",
    "KvCommand",
    "LENGTHS_STRUCTS",
    "MAX_DB",
    "MESSAGE_SOURCE",
    "Message",
    "PayloadError",
    "Record",
    "Replay",
    "TemporalUpsert",
    "ViewType",
    "change_fields",
    "change_key",
    "decode_kv",
    "decode_payload",
    "encode_payload",
    "lengths_struct",
    "position_marker",
]


# What encode_payload reads per record, bound here: compiled, a Final of this module is a C
# static, while a name imported from moonish.log.records (not compiled: its classes are pickled)
# is a dictionary lookup at every use.
_KV_CHANGE: Final = KvChange
_SMALL_LENGTHS: Final = _U32_SMALL
_PACK_LENGTH: Final = _U32_PACK
_PACK_CHANGE_HEAD: Final = _CHANGE_HEAD_AND_SIZE


def _blob(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


def encode_payload(record: Record, source: bytes | None = None) -> tuple[RecordType, bytes]:
    """Encode ``record`` as (frame type, payload bytes). ``source``: for a kv_change or a
    message, the source position to store instead of its own (the writer puts an append's
    position on its last record this way).

    Raises:
        ValueError: a field is out of range (db above 65535, key_pos outside argv, empty argv).
    """
    if type(record) is _KV_CHANGE:  # the write path's record: first, and without attributes
        (
            op,
            db,
            command,
            key,
            before,
            after,
            view,
            expired,
            replay,
            state,
            argv,
            loading,
            own,
            row,
        ) = record
        if source is None:
            source = own
        if not 0 <= db <= MAX_DB:
            raise ValueError(f"db index must be 0..{MAX_DB}, got {db}")
        flags = (
            (CHANGE_EXPIRED if expired else 0)
            | (CHANGE_LOADING if loading else 0)
            | (CHANGE_SOURCE if source else 0)
            | (_ROW_FLAGS[row] if row else 0)
        )
        small, pack = _SMALL_LENGTHS, _PACK_LENGTH  # a table lookup is faster than a pack call
        k, b, a = len(key), len(before), len(after)
        parts = [
            _PACK_CHANGE_HEAD(ord(op), flags, view, replay, db, 0, len(command)),
            command,
            small[k] if k < _SMALL else pack(k),
            key,
            small[b] if b < _SMALL else pack(b),
            before,
            small[a] if a < _SMALL else pack(a),
            after,
            pack(len(state)),
            state,
            pack(len(argv)),
        ]
        for arg in argv:
            k = len(arg)
            parts += (small[k] if k < _SMALL else pack(k), arg)
        if source:
            parts += (pack(len(source)), source)
        return RecordType.KV_CHANGE, b"".join(parts)
    if isinstance(record, Message):
        if not 0 <= record.db <= MAX_DB:
            raise ValueError(f"db index must be 0..{MAX_DB}, got {record.db}")
        if source is None:
            source = record.source
        head = _MESSAGE_HEAD.pack(record.db, MESSAGE_SOURCE if source else 0)
        tail = _blob(source) if source else b""
        return (
            RecordType.MESSAGE,
            head + _blob(record.prefix.encode()) + _blob(record.content) + tail,
        )
    if isinstance(record, KvCommand):
        if not record.argv:
            raise ValueError("a kv command needs at least the command name")
        if not 0 <= record.db <= MAX_DB:
            raise ValueError(f"db index must be 0..{MAX_DB}, got {record.db}")
        if not 0 <= record.key_pos < len(record.argv):
            raise ValueError(f"key_pos {record.key_pos} is outside argv of {len(record.argv)}")
        argc = len(record.argv)
        head = KV_HEAD.pack(record.db, record.key_pos, argc)
        lengths = lengths_struct(argc).pack(*map(len, record.argv))
        return RecordType.KV, head + lengths + b"".join(record.argv)
    if isinstance(record, TemporalUpsert):
        head = _TEMPORAL_HEAD.pack(record.valid_from_ms, record.system_from_ms)
        return RecordType.TEMPORAL, head + _blob(record.key) + _blob(record.value)
    if isinstance(record, GraphMutation):
        has_valid_to = record.valid_to_ms is not None
        head = _GRAPH_HEAD.pack(
            int(record.entity_kind), has_valid_to, 0, record.valid_to_ms or 0, record.system_from_ms
        )
        return RecordType.GRAPH, head + _blob(record.entity_id) + _blob(record.properties)
    if isinstance(record, Checkpoint):
        head = _CHECKPOINT_HEAD.pack(record.checkpoint_lsn)
        return RecordType.CHECKPOINT, head + _blob(record.label.encode())
    raise TypeError(f"not a moonish record: {record!r}")


def _read_blob(payload: bytes, pos: int) -> tuple[bytes, int]:
    (length,) = _U32.unpack_from(payload, pos)
    pos += 4
    end = pos + length
    if end > len(payload):
        raise PayloadError(f"field of {length} bytes at payload offset {pos} overruns the payload")
    return payload[pos:end], end


def decode_kv(payload: bytes) -> KvCommand:
    """Decode a kv payload. Raises PayloadError when it does not follow the grammar."""
    try:
        db, key_pos, argc = KV_HEAD.unpack_from(payload, 0)
        lengths = lengths_struct(argc).unpack_from(payload, KV_HEAD.size)
    except struct.error as exc:
        raise PayloadError(f"truncated kv payload: {exc}") from None
    pos = KV_HEAD.size + 4 * argc
    argv = []
    for length in lengths:
        argv.append(payload[pos : pos + length])
        pos += length
    if pos != len(payload):
        raise PayloadError(
            f"argument lengths add up to {pos} bytes, the payload has {len(payload)}"
        )
    if argc == 0 or key_pos >= argc:
        raise PayloadError(f"key_pos {key_pos} is outside argv of {argc}")
    return KvCommand(db, tuple(argv), key_pos)


def _decode_other(record_type: int, payload: bytes) -> Record:
    if record_type == RecordType.TEMPORAL:
        valid_from_ms, system_from_ms = _TEMPORAL_HEAD.unpack_from(payload, 0)
        key, pos = _read_blob(payload, _TEMPORAL_HEAD.size)
        value, pos = _read_blob(payload, pos)
        record: Record = TemporalUpsert(key, value, valid_from_ms, system_from_ms)
    elif record_type == RecordType.GRAPH:
        kind, has_valid_to, reserved, valid_to_ms, system_from_ms = _GRAPH_HEAD.unpack_from(
            payload, 0
        )
        if reserved or has_valid_to > 1 or (not has_valid_to and valid_to_ms):
            raise PayloadError(
                f"bad graph header (has_valid_to {has_valid_to}, valid_to_ms {valid_to_ms}, "
                f"reserved {reserved})"
            )
        entity_id, pos = _read_blob(payload, _GRAPH_HEAD.size)
        properties, pos = _read_blob(payload, pos)
        try:
            entity_kind = EntityKind(kind)
        except ValueError:
            raise PayloadError(f"unknown graph entity kind {kind}") from None
        record = GraphMutation(
            entity_id,
            entity_kind,
            valid_to_ms if has_valid_to else None,
            system_from_ms,
            properties,
        )
    elif record_type == RecordType.KV_CHANGE:
        record, pos = _decode_change(payload)
    elif record_type == RecordType.CHECKPOINT:
        (checkpoint_lsn,) = _CHECKPOINT_HEAD.unpack_from(payload, 0)
        label, pos = _read_blob(payload, _CHECKPOINT_HEAD.size)
        try:
            record = Checkpoint(checkpoint_lsn, label.decode())
        except UnicodeDecodeError:
            raise PayloadError("checkpoint label is not UTF-8") from None
    elif record_type == RecordType.MESSAGE:
        db, flags = _MESSAGE_HEAD.unpack_from(payload, 0)
        if flags & ~MESSAGE_SOURCE:
            raise PayloadError(f"bad message header (flags {flags})")
        prefix, pos = _read_blob(payload, _MESSAGE_HEAD.size)
        content, pos = _read_blob(payload, pos)
        source = b""
        if flags & MESSAGE_SOURCE:
            source, pos = _read_blob(payload, pos)
            if not source:
                raise PayloadError("message source flag with an empty source")
        try:
            record = Message(prefix.decode(), content, db, source)
        except UnicodeDecodeError:
            raise PayloadError("message prefix is not UTF-8") from None
    else:
        raise PayloadError(f"unknown record type {record_type}")
    if pos != len(payload):
        raise PayloadError(f"{len(payload) - pos} unexpected bytes after the last field")
    return record


KNOWN_CHANGE_FLAGS: Final = CHANGE_EXPIRED | CHANGE_LOADING | CHANGE_SOURCE | ROW_BITS


def change_fields(payload: bytes) -> tuple[int, int, int, int, bytes, bytes, bytes, bytes]:
    """The fields of a kv_change payload a reader needs, without the replay state:
    ``(op byte, change_flags, view, db, command, key, before, after)``; an image is ``b""``
    for null. Costs a few slices: no JSON is parsed. The whole payload is checked by the same
    rules as :func:`decode_payload` (verify), so a reader never accepts what verify rejects.

    Args:
        payload: the payload bytes.

    Raises:
        PayloadError: the payload does not follow the kv_change grammar (see
            :func:`_change_parts`).
    """
    op, flags, view, _, db, command, key, before, after, _, _, _ = _change_parts(payload, False)
    return op, flags, view, db, command, key, before, after


def change_key(payload: bytes) -> tuple[int, bytes]:
    """``(db, key)`` of a kv_change payload that :func:`change_fields` already accepted (a
    reader that encoded it): two slices, nothing checked again.

    Raises:
        PayloadError: the payload is too short for them.
    """
    try:
        db = KV_CHANGE_HEAD.unpack_from(payload, 0)[4]
        pos = KV_CHANGE_HEAD.size
        pos += 4 + _U32.unpack_from(payload, pos)[0]  # past the command
        (size,) = _U32.unpack_from(payload, pos)
    except struct.error as error:
        raise PayloadError(f"kv_change payload too short: {error}") from None
    return db, payload[pos + 4 : pos + 4 + size]


def _change_parts(
    payload: bytes, want_argv: bool
) -> tuple[int, int, int, int, int, bytes, bytes, bytes, bytes, bytes, list[bytes], bytes]:
    """Every field of a kv_change payload, checked: ``(op, change_flags, view, replay, db,
    command, key, before, after, state, argv, source)`` (``argv`` only with ``want_argv``).

    Raises:
        PayloadError: a field overruns the payload or bytes are left after the last one; the
            op is not ``c``/``u``/``d``/``r``; unknown change flags; a source flag with an
            empty source; first/last row flags on an op other than ``r``; a view or replay
            value out of range; a non-zero reserved field; state or argv where ``replay``
            says there are none (or argv missing for replay 1).
    """
    try:  # unrolled: the read path calls this once per kv_change record
        op, flags, view, replay, db, reserved = KV_CHANGE_HEAD.unpack_from(payload, 0)
        pos = KV_CHANGE_HEAD.size
        (size,) = _U32.unpack_from(payload, pos)
        command = payload[pos + 4 : pos + 4 + size]
        pos += 4 + size
        (size,) = _U32.unpack_from(payload, pos)
        key = payload[pos + 4 : pos + 4 + size]
        pos += 4 + size
        (size,) = _U32.unpack_from(payload, pos)
        before = payload[pos + 4 : pos + 4 + size]
        pos += 4 + size
        (size,) = _U32.unpack_from(payload, pos)
        after = payload[pos + 4 : pos + 4 + size]
        pos += 4 + size
        (size,) = _U32.unpack_from(payload, pos)
        state = payload[pos + 4 : pos + 4 + size]
        pos += 4 + size
        (argc,) = _U32.unpack_from(payload, pos)
        pos += 4
        argv: list[bytes] = []
        for _ in range(argc):
            (size,) = _U32.unpack_from(payload, pos)
            if want_argv:
                argv.append(payload[pos + 4 : pos + 4 + size])
            pos += 4 + size
        source = b""
        if flags & CHANGE_SOURCE:
            (size,) = _U32.unpack_from(payload, pos)
            source = payload[pos + 4 : pos + 4 + size]
            pos += 4 + size
    except struct.error as error:
        raise PayloadError(f"kv_change fields overrun the payload: {error}") from None
    if pos != len(payload):
        raise PayloadError(f"kv_change fields end at {pos}, the payload has {len(payload)} bytes")
    if (
        op not in _OPS
        or flags & ~KNOWN_CHANGE_FLAGS
        or view > ViewType.NEW_AND_OLD_IMAGES
        or replay > Replay.STATE
        or reserved
        or (state and replay != Replay.STATE)
        or (argc and replay != Replay.COMMAND)
        or (not argc and replay == Replay.COMMAND)
        or (flags & CHANGE_SOURCE and not source)
        or (flags & ROW_BITS and op != _OP_ROW)
        or (flags & CHANGE_LOAD_FIRST and not flags & CHANGE_FIRST_ROW)
        or (flags & CHANGE_LOAD_LAST and not flags & CHANGE_LAST_ROW)
    ):
        raise PayloadError(
            f"bad kv_change header (op {op}, flags {flags}, view {view}, replay {replay}, "
            f"reserved {reserved}, {len(state)} state bytes, {argc} argv)"
        )
    return op, flags, view, replay, db, command, key, before, after, state, argv, source


_OPS: Final = frozenset(b"cudr")
_OP_ROW: Final = ord("r")


def _decode_change(payload: bytes) -> tuple[KvChange, int]:
    op, flags, view, replay, db, command, key, before, after, state, argv, source = _change_parts(
        payload, True
    )
    record = KvChange(
        chr(op),
        db,
        command,
        key,
        before,
        after,
        ViewType(view),
        bool(flags & CHANGE_EXPIRED),
        Replay(replay),
        state,
        tuple(argv),
        bool(flags & CHANGE_LOADING),
        source,
        _ROW_NAMES[flags & ROW_BITS],
    )
    return record, len(payload)


def decode_payload(record_type: int, payload: bytes) -> Record:
    """Decode the payload of a frame of type ``record_type`` into its typed record.

    Raises:
        PayloadError: unknown type, or the payload does not follow its grammar.
    """
    if record_type == RecordType.KV:
        return decode_kv(payload)
    try:
        return _decode_other(record_type, payload)
    except struct.error as exc:
        raise PayloadError(f"truncated payload: {exc}") from None
