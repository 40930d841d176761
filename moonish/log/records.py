"""The record types of the log and the constants of their payloads: the kv, temporal, graph,
checkpoint, kv_change and message records as Python values, the payload headers
(``struct.Struct``) and flags. moonish.log.payloads encodes and decodes them (its module
docstring is the payload grammar) and re-exports every public name here."""

from __future__ import annotations

import enum
import functools
import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

_U32: Final = struct.Struct("<I")
_U32_PACK: Final = _U32.pack
_SMALL: Final = 4096
_U32_SMALL: Final = tuple(_U32_PACK(n) for n in range(_SMALL))
"""``_U32_SMALL[n]`` is ``_U32.pack(n)``, for the lengths of most fields."""
KV_HEAD: Final = struct.Struct(
    "<"
    "H"  # db: Redis database index
    "H"  # key_pos: index in argv of this record's key, 0 = none
    "I"  # argc: number of argv entries that follow
)
_TEMPORAL_HEAD: Final = struct.Struct(
    "<"
    "q"  # valid_from_ms: start of validity, ms since the Unix epoch
    "q"  # system_from_ms: when the system recorded it, ms since the Unix epoch
)
_GRAPH_HEAD: Final = struct.Struct(
    "<"
    "B"  # entity_kind: 1 node, 2 edge
    "B"  # has_valid_to: 0 open-ended, 1 valid_to_ms is set
    "H"  # reserved: zero
    "q"  # valid_to_ms: end of validity, ms since the Unix epoch (0 when open-ended)
    "q"  # system_from_ms: when the system recorded it, ms since the Unix epoch
)
KV_CHANGE_HEAD: Final = struct.Struct(
    "<"
    "B"  # op: b"c", b"u", b"d" or b"r"
    "B"  # change_flags: the CHANGE_* bits below
    "B"  # view: ViewType in force when written (0: stream off)
    "B"  # replay: Replay
    "H"  # db: Redis database index
    "H"  # reserved: zero
)
_CHANGE_HEAD_AND_SIZE: Final = struct.Struct(KV_CHANGE_HEAD.format + "I").pack
"""The head and the command's length (the first ``bytes(command)`` field), in one call."""
CHANGE_EXPIRED: Final = 1
"""``change_flags`` bit: the key was removed because its expiry time passed."""
CHANGE_LOADING: Final = 2
"""``change_flags`` bit: written by an AOF import, which runs commands as Redis loads an AOF
(no expiry on access, a past expiry time is set rather than deleting the key)."""
CHANGE_SOURCE: Final = 4
"""``change_flags`` bit: a source position (``bytes(source)``) follows argv."""
CHANGE_FIRST_ROW: Final = 8
"""``change_flags`` bit: the first ``r`` row of an RDB load (Debezium ``snapshot: "first"``)."""
CHANGE_LAST_ROW: Final = 16
"""``change_flags`` bit: the last ``r`` row of an RDB load (Debezium ``snapshot: "last"``)."""
CHANGE_LOAD_FIRST: Final = 32
"""``change_flags`` bit: the first ``r`` row of the whole load, over every shard it wrote
(with ``CHANGE_FIRST_ROW``: it is its shard's first too); a merged read marks only this row
``snapshot: "first"``."""
CHANGE_LOAD_LAST: Final = 64
"""``change_flags`` bit: the last ``r`` row of the whole load, over every shard it wrote
(with ``CHANGE_LAST_ROW``); a merged read marks only this row ``snapshot: "last"``."""
ROW_BITS: Final = CHANGE_FIRST_ROW | CHANGE_LAST_ROW | CHANGE_LOAD_FIRST | CHANGE_LOAD_LAST
"""The ``change_flags`` bits that only an ``r`` row may carry."""
_CHECKPOINT_HEAD: Final = struct.Struct(
    "<Q"  # checkpoint_lsn: last LSN the checkpoint covers
)
_MESSAGE_HEAD: Final = struct.Struct(
    "<"
    "H"  # db: Redis database index
    "H"  # message_flags: bit 0 MESSAGE_SOURCE; other bits zero
)
MESSAGE_SOURCE: Final = 1
"""``message_flags`` bit: a source position (``bytes(source)``) follows the content."""
MAX_DB: Final = 0xFFFF


LENGTHS_STRUCTS: Final = tuple(struct.Struct(f"<{argc}I") for argc in range(64))
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
class Message:
    """A non-data record (Debezium's logical-decoding message).

    Attributes:
        prefix: what the message is, UTF-8 (``"moonish.function"``, ``"moonish.skipped"``).
        content: its bytes, opaque to the log (readers show them base64-encoded).
        db: Redis database index the command ran in, 0..65535.
        source: the source position once this record is written (as ``KvChange.source``).
    """

    prefix: str
    content: bytes
    db: int = 0
    source: bytes = b""


class KvChange(NamedTuple):
    """What one write did to one key (moonish.log.payloads's module docstring describes the
    fields).

    Immutable, like the other records; a named tuple rather than a frozen dataclass because
    the write path builds one per key changed and the read path one per event, and a named
    tuple costs less to construct.

    Attributes:
        op: ``"c"``, ``"u"``, ``"d"``, or ``"r"`` (a key loaded from an RDB file, or a row
            a reader builds from a snapshot file).
        db: Redis database index.
        command: the command's name as received (``b"HSET"``).
        key: the key.
        before: the before image, UTF-8 JSON, or ``b""`` for null.
        after: the after image, UTF-8 JSON, or ``b""`` for null.
        view: the view type in force when written.
        expired: the key was removed because it expired, or (``HDEL``) hash fields were.
        replay: how the writer replays the record.
        state: with ``Replay.STATE``, the key's lossless image (``b""``: removed).
        argv: with ``Replay.COMMAND``, the command to run.
        loading: written by an AOF import (see ``CHANGE_LOADING``).
        source: the source position once this record is written (``b""``: none; see
            moonish.redis.routing.sources for its text form).
        row: with op ``r``, ``"first"``/``"last"``/``"only"`` for the first/last/only row of
            its shard in an RDB load, followed by ``"+load_first"``, ``"+load_last"`` or
            ``"+load_only"`` when it is also the first/last/only row of the whole load over
            every shard (:func:`row_name`); else ``""``.
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
    source: bytes = b""
    row: str = ""


def row_name(first: bool, last: bool, load_first: bool = False, load_last: bool = False) -> str:
    """``KvChange.row`` of an ``r`` row: ``first``/``last`` of its shard's rows, and
    ``load_first``/``load_last`` of the whole load's (which imply the shard's); ``""`` when
    it is none of these."""
    shard = "only" if first and last else "first" if first else "last" if last else ""
    if not shard:
        return ""
    load_first, load_last = load_first and first, load_last and last
    load = "only" if load_first and load_last else "first" if load_first else ""
    load = load or ("last" if load_last else "")
    return f"{shard}+load_{load}" if load else shard


_ROW_FLAGS: Final = {
    row_name(first, last, load_first, load_last): (
        (CHANGE_FIRST_ROW if first else 0)
        | (CHANGE_LAST_ROW if last else 0)
        | (CHANGE_LOAD_FIRST if load_first else 0)
        | (CHANGE_LOAD_LAST if load_last else 0)
    )
    for first in (False, True)
    for last in (False, True)
    for load_first in (False, first)
    for load_last in (False, last)
}
"""``KvChange.row`` -> its ``change_flags`` bits: every valid combination (a load's first row
is its shard's first, a load's last its shard's last)."""
_ROW_NAMES: Final = {flags: name for name, flags in _ROW_FLAGS.items()}


def position_marker(source: bytes) -> KvChange:
    """A kv_change that changes nothing and only carries the source position ``source``:
    view 0 (readers skip it, as every record written with the stream off), no key, no
    command, nothing to replay. Written to shards a command or an import left without a
    record (moonish.redis.routing.router), so their stored position is current."""
    return KvChange("u", 0, b"", b"", b"", b"", ViewType.OFF, source=source)


Record = KvCommand | TemporalUpsert | GraphMutation | Checkpoint | KvChange | Message
