"""Typed records and their payload encodings (inside a frame; see moonish.log.format).

Payload grammar, little-endian, ``bytes(n)`` meaning ``len:u32`` followed by ``len`` bytes::

    kv         := db:u16 key_pos:u16 argc:u32 len:u32[argc] argv[0] .. argv[argc-1]
    temporal   := valid_from_ms:i64 system_from_ms:i64 bytes(key) bytes(value)
    graph      := entity_kind:u8 has_valid_to:u8 reserved:u16 valid_to_ms:i64
                  system_from_ms:i64 bytes(entity_id) bytes(properties)
    checkpoint := checkpoint_lsn:u64 bytes(label, UTF-8)
    kv_change  := op:u8 change_flags:u8 view:u8 replay:u8 db:u16 reserved:u16
                  bytes(command) bytes(key) bytes(before) bytes(after) bytes(state)
                  argc:u32 bytes(argv[0]) .. bytes(argv[argc-1])

A kv_change record says what a write did to one key, as the writer's keyspace saw it: ``op``
is ``c``, ``u`` or ``d`` (ASCII); ``change_flags`` bit 0 marks a delete by expiry, bit 1 a
record of an AOF import (replayed with Redis's loading semantics); ``view`` is
the stream view type in force (``ViewType``; 0: the stream was off, readers skip the record);
``before``/``after`` are the images readers put in the envelope as they are (UTF-8 JSON,
empty for null); ``replay`` says how the writer rebuilds its keyspace from the log: ``1``
run ``argv`` (the whole command, once per command and shard), ``2`` set the key to ``state``
(a lossless image; empty: the key is gone), ``0`` nothing (another record of the same command
replays it). ``argv`` is empty unless ``replay`` is 1.

A kv payload lists all argument lengths before the argument bytes, so a reader gets every length
with one ``struct`` call. ``key_pos`` is the index in ``argv`` of the key this record is about, 0
when the command has no
key (FLUSHDB). A command that touches several keys is written as one record per key, as an
atomic batch, so every record says what happened to exactly one key.
"""

from __future__ import annotations

import enum
import functools
import struct
from dataclasses import dataclass

from moonish.log.format import RecordType

_U32 = struct.Struct("<I")
KV_HEAD = struct.Struct(
    "<"
    "H"  # db: Redis database index
    "H"  # key_pos: index in argv of this record's key, 0 = none
    "I"  # argc: number of argv entries that follow
)
_TEMPORAL_HEAD = struct.Struct(
    "<"
    "q"  # valid_from_ms: start of validity, ms since the Unix epoch
    "q"  # system_from_ms: when the system recorded it, ms since the Unix epoch
)
_GRAPH_HEAD = struct.Struct(
    "<"
    "B"  # entity_kind: 1 node, 2 edge
    "B"  # has_valid_to: 0 open-ended, 1 valid_to_ms is set
    "H"  # reserved: zero
    "q"  # valid_to_ms: end of validity, ms since the Unix epoch (0 when open-ended)
    "q"  # system_from_ms: when the system recorded it, ms since the Unix epoch
)
KV_CHANGE_HEAD = struct.Struct(
    "<"
    "B"  # op: b"c", b"u" or b"d"
    "B"  # change_flags: bit 0 CHANGE_EXPIRED, bit 1 CHANGE_LOADING
    "B"  # view: ViewType in force when written (0: stream off)
    "B"  # replay: Replay
    "H"  # db: Redis database index
    "H"  # reserved: zero
)
CHANGE_EXPIRED = 1
"""``change_flags`` bit: the key was removed because its expiry time passed."""
CHANGE_LOADING = 2
"""``change_flags`` bit: written by an AOF import, which runs commands as Redis loads an AOF
(no expiry on access, a past expiry time is set rather than deleting the key)."""
_CHECKPOINT_HEAD = struct.Struct(
    "<Q"  # checkpoint_lsn: last LSN the checkpoint covers
)
MAX_DB = 0xFFFF


LENGTHS_STRUCTS = tuple(struct.Struct(f"<{argc}I") for argc in range(64))
"""``LENGTHS_STRUCTS[argc]``: the lengths of ``argc`` arguments, for argc < 64."""


@functools.lru_cache(maxsize=256)
def _large_lengths_struct(argc: int) -> struct.Struct:
    return struct.Struct(f"<{argc}I")


def lengths_struct(argc: int) -> struct.Struct:
    """The ``struct.Struct`` of ``argc`` little-endian u32 argument lengths (cached)."""
    return LENGTHS_STRUCTS[argc] if argc < 64 else _large_lengths_struct(argc)


class PayloadError(ValueError):
    """A payload does not follow its grammar (the reader turns this into CorruptionError)."""


class ViewType(enum.IntEnum):
    """What a change record carries (DynamoDB Streams' ``StreamViewType``); ``OFF``: the
    stream was disabled and readers skip the record."""

    OFF = 0
    KEYS_ONLY = 1
    NEW_IMAGE = 2
    OLD_IMAGE = 3
    NEW_AND_OLD_IMAGES = 4


class Replay(enum.IntEnum):
    """How the writer rebuilds its keyspace from a kv_change record."""

    NONE = 0
    COMMAND = 1
    STATE = 2


class EntityKind(enum.IntEnum):
    """Whether a graph mutation is about a node or an edge."""

    NODE = 1
    EDGE = 2


@dataclass(frozen=True, slots=True)
class KvCommand:
    """A Redis-style write command on one key.

    Attributes:
        db: Redis database index (``SELECT``), 0..65535.
        argv: the command and its arguments, binary-safe, as Redis received them.
        key_pos: index in ``argv`` of the key this record is about; 0 for keyless commands.
    """

    db: int
    argv: tuple[bytes, ...]
    key_pos: int = 1

    @property
    def command(self) -> bytes:
        """The command name, upper-cased (``b"SET"``)."""
        return self.argv[0].upper()

    @property
    def key(self) -> bytes | None:
        """The key this record is about, or ``None`` for keyless commands."""
        return self.argv[self.key_pos] if self.key_pos else None


@dataclass(frozen=True, slots=True)
class TemporalUpsert:
    """A new version of a temporal key, valid from ``valid_from_ms``."""

    key: bytes
    value: bytes
    valid_from_ms: int
    system_from_ms: int


@dataclass(frozen=True, slots=True)
class GraphMutation:
    """A change to a graph node or edge; ``valid_to_ms`` closes its validity when set."""

    entity_id: bytes
    entity_kind: EntityKind
    valid_to_ms: int | None
    system_from_ms: int
    properties: bytes = b""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A marker that everything up to ``checkpoint_lsn`` is covered by ``label``."""

    checkpoint_lsn: int
    label: str


@dataclass(frozen=True, slots=True)
class KvChange:
    """What one write did to one key (see the module docstring for the fields).

    Attributes:
        op: ``"c"``, ``"u"`` or ``"d"`` (``"r"`` only in snapshot rows, never in a log).
        db: Redis database index.
        command: the command's name as received (``b"HSET"``).
        key: the key.
        before: the before image, UTF-8 JSON, or ``b""`` for null.
        after: the after image, UTF-8 JSON, or ``b""`` for null.
        view: the view type in force when written.
        expired: the key was removed because it expired.
        replay: how the writer replays the record.
        state: with ``Replay.STATE``, the key's lossless image (``b""``: removed).
        argv: with ``Replay.COMMAND``, the command to run.
        loading: written by an AOF import (see ``CHANGE_LOADING``).
    """

    op: str
    db: int
    command: bytes
    key: bytes
    before: bytes
    after: bytes
    view: ViewType
    expired: bool = False
    replay: Replay = Replay.NONE
    state: bytes = b""
    argv: tuple[bytes, ...] = ()
    loading: bool = False


Record = KvCommand | TemporalUpsert | GraphMutation | Checkpoint | KvChange


def _blob(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


def encode_payload(record: Record) -> tuple[RecordType, bytes]:
    """Encode ``record`` as (frame type, payload bytes).

    Raises:
        ValueError: a field is out of range (db above 65535, key_pos outside argv, empty argv).
    """
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
    if isinstance(record, KvChange):
        if not 0 <= record.db <= MAX_DB:
            raise ValueError(f"db index must be 0..{MAX_DB}, got {record.db}")
        head = KV_CHANGE_HEAD.pack(
            ord(record.op),
            (CHANGE_EXPIRED if record.expired else 0) | (CHANGE_LOADING if record.loading else 0),
            record.view,
            record.replay, record.db, 0,
        )  # fmt: skip
        command, key, before, after, state, argv = (
            record.command, record.key, record.before, record.after, record.state, record.argv,
        )  # fmt: skip
        parts = [
            head, _U32.pack(len(command)), command, _U32.pack(len(key)), key,
            _U32.pack(len(before)), before, _U32.pack(len(after)), after,
            _U32.pack(len(state)), state, _U32.pack(len(argv)),
        ]  # fmt: skip
        for arg in argv:
            parts += (_U32.pack(len(arg)), arg)
        return RecordType.KV_CHANGE, b"".join(parts)
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
    else:
        raise PayloadError(f"unknown record type {record_type}")
    if pos != len(payload):
        raise PayloadError(f"{len(payload) - pos} unexpected bytes after the last field")
    return record


KNOWN_CHANGE_FLAGS = CHANGE_EXPIRED | CHANGE_LOADING


def change_fields(
    payload: bytes, *, snapshot_row: bool = False
) -> tuple[int, int, int, int, bytes, bytes, bytes, bytes]:
    """The fields of a kv_change payload a reader needs, without the replay state:
    ``(op byte, change_flags, view, db, command, key, before, after)``; an image is ``b""``
    for null. Costs a few slices: no JSON is parsed. The whole payload is checked by the same
    rules as :func:`decode_payload` (verify), so a reader never accepts what verify rejects.

    Args:
        payload: the payload bytes.
        snapshot_row: the payload is a snapshot row built by a reader (op ``r``), not a record.

    Raises:
        PayloadError: the payload does not follow the kv_change grammar (see
            :func:`_change_parts`).
    """
    op, flags, view, _, db, command, key, before, after, _, _ = _change_parts(
        payload, snapshot_row, False
    )
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
    payload: bytes, snapshot_row: bool, want_argv: bool
) -> tuple[int, int, int, int, int, bytes, bytes, bytes, bytes, bytes, list[bytes]]:
    """Every field of a kv_change payload, checked: ``(op, change_flags, view, replay, db,
    command, key, before, after, state, argv)`` (``argv`` only with ``want_argv``).

    Raises:
        PayloadError: a field overruns the payload or bytes are left after the last one; the
            op is not ``c``/``u``/``d`` (``r`` only in snapshot rows); unknown change flags; a
            view or replay value out of range; a non-zero reserved field; state or argv
            where ``replay`` says there are none (or argv missing for replay 1).
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
    except struct.error as error:
        raise PayloadError(f"kv_change fields overrun the payload: {error}") from None
    if pos != len(payload):
        raise PayloadError(f"kv_change fields end at {pos}, the payload has {len(payload)} bytes")
    if (
        op not in (_OPS_SNAPSHOT if snapshot_row else _OPS)
        or flags & ~KNOWN_CHANGE_FLAGS
        or view > ViewType.NEW_AND_OLD_IMAGES
        or replay > Replay.STATE
        or reserved
        or (state and replay != Replay.STATE)
        or (argc and replay != Replay.COMMAND)
        or (not argc and replay == Replay.COMMAND)
    ):
        raise PayloadError(
            f"bad kv_change header (op {op}, flags {flags}, view {view}, replay {replay}, "
            f"reserved {reserved}, {len(state)} state bytes, {argc} argv)"
        )
    return op, flags, view, replay, db, command, key, before, after, state, argv


_OPS = frozenset(b"cud")
_OPS_SNAPSHOT = frozenset(b"cudr")


def _decode_change(payload: bytes) -> tuple[KvChange, int]:
    op, flags, view, replay, db, command, key, before, after, state, argv = _change_parts(
        payload, False, True
    )
    record = KvChange(
        chr(op), db, command, key, before, after, ViewType(view), bool(flags & CHANGE_EXPIRED),
        Replay(replay), state, tuple(argv), bool(flags & CHANGE_LOADING),
    )  # fmt: skip
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
