"""The RDB reader on hand-made files: the encodings redis-server 7.0 no longer writes (ziplists,
zipmaps, text doubles, RDB 9/11/12), Redis 7.4's hashes with field TTLs, damage inside values,
CRC-64, short reads."""

from __future__ import annotations

import io
import struct

import pytest

from moonish.errors import MoonishError
from moonish.redis.rdb.reader import (
    RdbAux,
    RdbCorruptionError,
    RdbFunction,
    RdbKey,
    RdbReader,
    RdbResizeDb,
    RdbSlotInfo,
    RdbUnsupportedError,
    crc64,
)
from moonish.redis.rdb.streams import complete_stream
from moonish.redis.rdb.values import RdbConsumer, RdbGroup, RdbPending, RdbStreamMeta
from tests.support.redis.rdb_dumps import LIBRARY, RNG
from tests.support.servers.redis_server import stream_state


def test_not_an_rdb_file() -> None:
    with pytest.raises(RdbUnsupportedError, match="not a Redis or Valkey RDB file"):
        list(RdbReader(io.BytesIO(b"*2\r\n$6\r\nSELECT\r\n"), "x.aof"))


# Hand-made files: the encodings redis-server 7.0 no longer writes (ziplists, zipmaps, text
# doubles, RDB 9/11/12) and damage inside values. The blobs follow docs/rdb-format.md.
def _len(n: int) -> bytes:
    if n < 64:
        return bytes([n])
    if n < 16384:
        return bytes([0x40 | n >> 8, n & 0xFF])
    return b"\x80" + n.to_bytes(4, "big")


def _str(data: bytes) -> bytes:
    return _len(len(data)) + data


def _rdb(body: bytes, version: int = 10, crc: bool = True) -> bytes:
    data = b"REDIS%04d" % version + body + b"\xff"
    return data + (crc64(0, data) if crc else 0).to_bytes(8, "little")


def _key(rdb_type: int, key: bytes, value: bytes) -> bytes:
    return bytes([rdb_type]) + _str(key) + value


ZL_INTS = [(0, b"\xf1"), (12, b"\xfd"), (-100, b"\xfe\x9c"), (1000, b"\xc0\xe8\x03"),
           (-(2**23), b"\xf0\x00\x00\x80"), (2**31 - 1, b"\xd0\xff\xff\xff\x7f"),
           (-(2**63), b"\xe0" + struct.pack("<q", -(2**63)))]  # fmt: skip


def _ziplist(items: list[bytes | int]) -> bytes:
    """A ziplist (ziplist.c): 6-bit, 14-bit and 32-bit strings, every integer encoding."""
    entries, prev = [], 0
    for item in items:
        if isinstance(item, int):
            body = dict(ZL_INTS)[item]
        elif len(item) < 64:
            body = bytes([len(item)]) + item
        elif len(item) < 16384:
            body = bytes([0x40 | len(item) >> 8, len(item) & 0xFF]) + item
        else:
            body = b"\x80" + len(item).to_bytes(4, "big") + item
        prevlen = bytes([prev]) if prev < 254 else b"\xfe" + struct.pack("<I", prev)
        entries.append(prevlen + body)
        prev = len(prevlen + body)
    data = b"".join(entries)
    return struct.pack("<IIH", 11 + len(data), 10 + len(data) - prev, len(items)) + data + b"\xff"


LP_INTS = [(5, b"\x05"), (127, b"\x7f"), (-1, b"\xdf\xff"), (4095, b"\xcf\xff"),
           (-4096, b"\xd0\x00"), (-32768, b"\xf1\x00\x80"), (2**23 - 1, b"\xf2\xff\xff\x7f"),
           (-(2**31), b"\xf3\x00\x00\x00\x80"),
           (2**63 - 1, b"\xf4" + struct.pack("<q", 2**63 - 1))]  # fmt: skip


def _listpack(items: list[bytes | int]) -> bytes:
    """A listpack (listpack.c): 6-bit, 12-bit and 32-bit strings, every integer encoding."""
    entries = []
    for item in items:
        if isinstance(item, int):
            wide = b"\xf4" + struct.pack("<q", item)
            body = bytes([item]) if 0 <= item < 128 else dict(LP_INTS).get(item, wide)
        elif len(item) < 64:
            body = bytes([0x80 | len(item)]) + item
        elif len(item) < 4096:
            body = bytes([0xE0 | len(item) >> 8, len(item) & 0xFF]) + item
        else:
            body = b"\xf0" + struct.pack("<I", len(item)) + item
        n, backlen = len(body), b""
        while True:  # 7 bits a byte; the bytes are not read back by the reader
            backlen = bytes([n & 0x7F | (0x80 if backlen else 0)]) + backlen
            n >>= 7
            if not n:
                break
        entries.append(body + backlen)
    data = b"".join(entries)
    return struct.pack("<IH", 7 + len(data), len(items)) + data + b"\xff"


def _zipmap(pairs: list[tuple[bytes, bytes]]) -> bytes:
    out = bytes([len(pairs)])
    for field, value in pairs:
        out += _len8(field) + field + _len8(value) + b"\x02" + value + b"??"  # 2 free bytes
    return out + b"\xff"


def _len8(data: bytes) -> bytes:
    return bytes([len(data)]) if len(data) < 254 else b"\xfe" + struct.pack("<I", len(data))


MIXED: list[bytes | int] = [b"a", b"", b"x" * 100, b"y" * 20000, *(i for i, _ in ZL_INTS)]


LP_MIXED: list[bytes | int] = [b"a", b"", b"x" * 100, b"y" * 5000, *(i for i, _ in LP_INTS)]


def _text(items: list[bytes | int]) -> list[bytes]:
    return [b"%d" % i if isinstance(i, int) else i for i in items]


HANDMADE = {
    "list": (_key(1, b"k", _len(2) + _str(b"a") + b"\xc0\x07"), [b"a", b"7"]),
    "list ziplist": (_key(10, b"k", _str(_ziplist(MIXED))), _text(MIXED)),
    "list quicklist 1": (
        _key(14, b"k", _len(2) + _str(_ziplist(MIXED)) + _str(_ziplist([b"z"]))),
        [*_text(MIXED), b"z"],
    ),
    "list quicklist 2": (
        _key(18, b"k", _len(2) + b"\x02" + _str(_listpack(LP_MIXED)) + b"\x01" + _str(b"p")),
        [*_text(LP_MIXED), b"p"],
    ),
    "set listpack": (_key(20, b"k", _str(_listpack(LP_MIXED))), set(_text(LP_MIXED))),
    "set intset": (
        _key(11, b"k", _str(struct.pack("<II2q", 8, 2, -(2**63), 5))),
        {b"-9223372036854775808", b"5"},
    ),
    "zset text doubles": (
        _key(
            3, b"k", _len(3) + _str(b"a") + b"\x031.5" + _str(b"b") + b"\xfe" + _str(b"c") + b"\xff"
        ),
        [(b"c", float("-inf")), (b"a", 1.5), (b"b", float("inf"))],
    ),
    "zset ziplist": (
        _key(12, b"k", _str(_ziplist([b"m", b"2.5", b"n", -100, b"o", b"inf"]))),
        [(b"n", -100.0), (b"m", 2.5), (b"o", float("inf"))],
    ),
    "zset listpack": (
        _key(17, b"k", _str(_listpack([b"m", b"-1e3", b"n", 5]))),
        [(b"m", -1000.0), (b"n", 5.0)],
    ),
    "hash zipmap": (
        _key(9, b"k", _str(_zipmap([(b"f", b"v"), (b"g" * 300, b""), (b"h", b"w" * 300)]))),
        {b"f": b"v", b"g" * 300: b"", b"h": b"w" * 300},
    ),
    "hash ziplist": (
        _key(13, b"k", _str(_ziplist([b"f", 1000, b"g", b"x" * 100]))),
        {b"f": b"1000", b"g": b"x" * 100},
    ),
    "hash listpack": (
        _key(16, b"k", _str(_listpack([b"f", 127, 5, b"v"]))),
        {b"f": b"127", b"5": b"v"},
    ),
}


@pytest.mark.parametrize("name", sorted(HANDMADE))
@pytest.mark.parametrize("version", [9, 10, 11, 12])
def test_handmade_encodings(name: str, version: int) -> None:
    body, expected = HANDMADE[name]
    (item,) = RdbReader(io.BytesIO(_rdb(body, version)), "h.rdb")
    assert isinstance(item, RdbKey)
    value = item.value.items() if item.type == "zset" else item.value
    value = list(value) if item.type == "list" else value
    assert (item.key, value, item.offset) == (b"k", expected, 9)


def test_key_attributes_and_hints() -> None:
    body = (
        b"\xfa" + _str(b"redis-ver") + _str(b"7.4.0")
        + b"\xfe" + _len(5) + b"\xfb" + _len(2) + _len(1)
        + b"\xf4" + _len(16383) + _len(2) + _len(1)
        + b"\xfd" + struct.pack("<i", 2_000_000_000) + b"\xf8" + _len(300) + b"\xf9\x07"
        + _key(0, b"a", _str(b"1"))
        + b"\xfc" + struct.pack("<q", -5) + _key(0, b"b", b"\xc2" + struct.pack("<i", -(2**31)))
        + b"\xf5" + _str(LIBRARY)
    )  # fmt: skip
    items = list(RdbReader(io.BytesIO(_rdb(body, 12, crc=False)), "h.rdb"))
    assert items == [
        RdbAux(b"redis-ver", b"7.4.0"),
        RdbResizeDb(5, 2, 1),
        RdbSlotInfo(16383, 2, 1),
        RdbKey(5, b"a", "string", b"1", 2_000_000_000_000, 36, idle_s=300, lfu_freq=7),
        RdbKey(5, b"b", "string", b"-2147483648", -5, 51),
        RdbFunction(LIBRARY),
    ]


def _stream_value(rdb_type: int) -> bytes:
    """A stream of 2 live and 1 deleted entries in one node, and a group with one consumer
    holding one pending entry (t_stream.c, rdb.c)."""
    lp = _listpack([2, 1, 1, b"f", 0,  # count, deleted, master fields, terminator
                    2, 0, 0, b"v0", 4,  # SAMEFIELDS entry 5-10
                    3, 0, 1, b"dead", 4,  # deleted SAMEFIELDS entry 5-11
                    0, 1, 0, 2, b"a", b"1", b"b", b"2", 9])  # 6-10, own fields  # fmt: skip
    v2 = rdb_type >= 19
    return (
        _len(1) + _str(struct.pack(">QQ", 5, 10)) + _str(lp)
        + _len(2) + _len(6) + _len(10)
        + (_len(5) + _len(10) + _len(5) + _len(11) + _len(3) if v2 else b"")
        + _len(1) + _str(b"g") + _len(6) + _len(10) + (_len(3) if v2 else b"")
        + _len(1) + struct.pack(">QQ", 5, 10) + struct.pack("<q", 1234) + _len(2)
        + _len(1) + _str(b"c") + struct.pack("<q", 99)
        + (struct.pack("<q", 100) if rdb_type == 21 else b"")
        + _len(1) + struct.pack(">QQ", 5, 10)
    )  # fmt: skip


@pytest.mark.parametrize(("rdb_type", "version"), [(15, 9), (19, 10), (21, 11)])
def test_handmade_streams(rdb_type: int, version: int) -> None:
    body = _key(rdb_type, b"s", _stream_value(rdb_type))
    (item,) = RdbReader(io.BytesIO(_rdb(body, version)), "h.rdb")
    assert isinstance(item, RdbKey) and item.stream is not None
    assert item.value.entries == {(5, 10): [b"f", b"v0"], (6, 10): [b"a", b"1", b"b", b"2"]}
    assert item.value.last_id == (6, 10)
    v2 = rdb_type >= 19
    assert item.stream == RdbStreamMeta(
        2,
        (5, 10) if v2 else None,
        (5, 11) if v2 else None,
        3 if v2 else None,
        (
            RdbGroup(
                b"g",
                (6, 10),
                3 if v2 else None,
                (RdbPending((5, 10), 1234, 2, b"c"),),
                (RdbConsumer(b"c", 99, 100 if rdb_type == 21 else None, ((5, 10),)),),
            ),
        ),
    )
    stream = complete_stream(item, "h.rdb")  # type 15 migrates as Redis 7.0 loads it
    assert stream_state(stream) == (
        [(b"5-10", [b"f", b"v0"]), (b"6-10", [b"a", b"1", b"b", b"2"])],
        b"6-10",
        b"5-11" if v2 else b"0-0",
        3 if v2 else 2,
        [(b"g", b"6-10", 3 if v2 else 2, [(b"5-10", b"c", 1234, 2)], [(b"c", 99)])],
    )


def test_a_pending_entry_without_a_consumer_is_refused() -> None:
    value = _stream_value(19)
    orphan = value[: -(1 + 16)] + _len(0)  # the consumer owns nothing: 5-10 has no owner
    (item,) = RdbReader(io.BytesIO(_rdb(_key(19, b"s", orphan), 10)), "h.rdb")
    assert isinstance(item, RdbKey) and item.stream is not None
    assert item.stream.groups[0].pending[0].consumer is None
    with pytest.raises(RdbCorruptionError, match="has no consumer") as info:
        complete_stream(item, "h.rdb")
    assert (info.value.path, info.value.offset, info.value.key) == ("h.rdb", item.offset, b"s")


def _module_id(name: str) -> int:
    charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    return sum(charset.index(c) << (6 * (8 - j)) for j, c in enumerate(name))


def test_crc64() -> None:
    assert crc64(0, b"123456789") == 0xE9C6D914C4B8D9CA  # Redis crc64.c's test
    data = RNG.randbytes(1000)
    for cut in (0, 1, 7, 8, 9, 500, 999):
        assert crc64(crc64(0, data[:cut]), data[cut:]) == crc64(0, data)


T1, T2 = 1_800_000_000_000, 1_800_000_000_500  # field expiry times, ms


HASH_TTLS = {
    22: _len(3) + _len(0) + _str(b"a") + _str(b"1") + b"\x81" + T1.to_bytes(8, "big")
        + _str(b"b") + _str(b"2") + b"\x81" + T2.to_bytes(8, "big") + _str(b"c") + _str(b"3"),
    23: _str(_listpack([b"a", b"1", 0, b"b", b"2", T1, b"c", b"3", T2])),
    24: struct.pack("<q", T1) + _len(3) + _len(0) + _str(b"a") + _str(b"1")
        + _len(1) + _str(b"b") + _str(b"2") + _len(501) + _str(b"c") + _str(b"3"),
    25: struct.pack("<q", T1) + _str(_listpack([b"a", b"1", 0, b"b", b"2", T1, b"c", b"3", T2])),
}  # fmt: skip


@pytest.mark.parametrize("rdb_type", sorted(HASH_TTLS))
def test_handmade_hashes_with_field_ttls(rdb_type: int) -> None:
    """Redis 7.4 (RDB 12) hashes with field TTLs; the installed redis-server is 7.0."""
    body = _key(rdb_type, b"h", HASH_TTLS[rdb_type])
    (item,) = RdbReader(io.BytesIO(_rdb(body, 12)), "h.rdb")
    assert isinstance(item, RdbKey)
    assert (item.type, item.value) == ("hash", {b"a": b"1", b"b": b"2", b"c": b"3"})
    assert item.field_expire_at_ms == {b"b": T1, b"c": T2}


def _error(body: bytes, version: int = 10) -> MoonishError:
    with pytest.raises(MoonishError) as info:
        list(RdbReader(io.BytesIO(_rdb(body, version)), "h.rdb"))
    return info.value


BAD_LISTPACK = bytearray(_listpack([b"a", b"b"]))


BAD_LISTPACK[9] = 0xF5  # the second entry's encoding


ERRORS = {
    "unknown opcode": (b"\xf3", RdbUnsupportedError, 9, None, "unknown opcode or value type 0xf3"),
    "module value": (
        _key(7, b"m", b"\x81" + (_module_id("ReJSON-RL") << 10 | 3).to_bytes(8, "big")),
        RdbUnsupportedError,
        9,
        b"m",
        "module values are not supported (module type 'ReJSON-RL')",
    ),
    "module aux": (b"\xf7\x01\x02\x02", RdbUnsupportedError, 9, None, "MODULE_AUX"),
    "pre-GA function": (b"\xf6" + _str(b"x"), RdbUnsupportedError, 9, None, "pre-release"),
    "stream entries count": (
        _key(21, b"s", _len(0) + _len(1) + _len(0) * 8),
        RdbCorruptionError,
        9 + 3 + 1,
        b"s",
        "says 1 entries but holds 0",
    ),
    "field TTL out of range": (
        _key(22, b"h", _len(1) + b"\x81" + (2**48).to_bytes(8, "big") + _str(b"f") + _str(b"v")),
        RdbCorruptionError,
        13,
        b"h",
        "hash field expiry 281474976710656 out of range",
    ),
    "bad listpack": (
        _key(20, b"k", _str(bytes(BAD_LISTPACK))),
        RdbCorruptionError,
        12,
        b"k",
        "unknown listpack entry encoding 0xf5 at byte 9",
    ),
    "duplicate member": (
        _key(2, b"k", _len(2) + _str(b"a") + _str(b"a")),
        RdbCorruptionError,
        15,
        b"k",
        "twice",
    ),
    "NaN score": (
        _key(5, b"k", _len(1) + _str(b"a") + struct.pack("<d", float("nan"))),
        RdbCorruptionError,
        15,
        b"k",
        "NaN",
    ),
    "bad LZF": (
        _key(0, b"k", b"\xc3" + _len(3) + _len(50) + b"\x1f\x00\x00"),
        RdbCorruptionError,
        12,
        b"k",
        "LZF",
    ),
    "huge length": (
        _key(0, b"k", b"\x81" + (2**62).to_bytes(8, "big") + b"abc"),
        RdbCorruptionError,
        33,
        b"k",
        "truncated RDB file: 4611686018427387904 bytes needed, 12 left",
    ),
    "huge LZF": (
        _key(0, b"k", b"\xc3" + _len(3) + b"\x81" + (2**40).to_bytes(8, "big") + b"\x00ab"),
        RdbCorruptionError,
        12,
        b"k",
        "LZF string of 3 bytes claims 1099511627776",
    ),
    "quicklist container": (
        _key(18, b"k", _len(1) + b"\x03" + _str(b"x")),
        RdbCorruptionError,
        13,
        b"k",
        "container 3",
    ),
    "bad length": (_key(2, b"k", b"\xc5"), RdbCorruptionError, 12, b"k", "string encoding"),
    "attributes then AUX": (
        b"\xf9\x01\xfa" + _str(b"a") + _str(b"b"),
        RdbCorruptionError,
        11,
        None,
        "attributes",
    ),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_handmade_errors(name: str) -> None:
    body, kind, offset, key, message = ERRORS[name]
    error = _error(body)
    assert type(error) is kind
    assert (error.path, error.offset, getattr(error, "key", None)) == ("h.rdb", offset, key)
    assert message in str(error)


class _Trickle(io.RawIOBase):
    """A file that returns at most 3 bytes a read, as a pipe or socket may."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self.data.read(min(size, 3) if size >= 0 else 3)


def test_short_reads() -> None:
    data = _rdb(HANDMADE["list ziplist"][0])
    (item,) = RdbReader(_Trickle(data), "pipe")  # type: ignore[arg-type]
    assert list(item.value) == HANDMADE["list ziplist"][1]  # type: ignore[union-attr]


def test_crc_zero_is_not_checked() -> None:
    data = _rdb(_key(0, b"k", _str(b"v")), crc=False)
    assert [i.key for i in RdbReader(io.BytesIO(data), "h.rdb")] == [b"k"]  # type: ignore[union-attr]
