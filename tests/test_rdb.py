"""The RDB reader (moonish/redis/rdb/reader.py) against dump.rdb files a real redis-server wrote with
every type in every encoding it uses, plus damaged and hand-made files."""

from __future__ import annotations

import io
import random
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from moonish.errors import CorruptionError, MoonishError, UnsupportedFormatError
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
    read_rdb,
)
from moonish.redis.rdb.streams import complete_stream
from moonish.redis.rdb.values import RdbConsumer, RdbGroup, RdbPending, RdbStreamMeta
from moonish.values.model import Entry
from tests.redis_server import (
    comparable,
    raw_client,
    redis_entries,
    redis_server,
    redis_stream,
    stream_state,
)

FAR_MS = 4_102_444_800_123  # 2100-01-01 plus 123 ms
RNG = random.Random(11)
INCOMPRESSIBLE = RNG.randbytes(3000)
LIBRARY = b"#!lua name=rdblib\nredis.register_function('rdbf', function() return 1 end)"


def _fill(client: redis.Redis) -> None:
    """Every type in every encoding redis-server 7.0 writes, switching the conversion limits
    between keys (an encoding is chosen when a key is written, kept by SAVE)."""
    ints = [0, 1, 12, 13, 127, 128, -1, -4096, 4095, 4096, -32768, 32767, 40000, -(2**23),
            2**23, 2**31 - 1, -(2**31), 2**31, 2**40, 2**63 - 1, -(2**63)]  # fmt: skip
    texts = [b"a", b"", b"x" * 63, b"y" * 64, b"z" * 4095, b"w" * 4096, b"\x00\xff\xfe", b"007",
             b"1.5", b"-0", b"+1", b" 1", b"9223372036854775808"]  # fmt: skip
    elements = [b"%d" % i for i in ints] + texts
    c = client
    # strings: raw, int-encoded, LZF-compressed, incompressible, binary key, empty
    c.set(b"s:raw", b"hello")
    for i in ints:
        c.set(b"s:int:%d" % i, b"%d" % i)
    for t in texts:
        c.set(b"s:text:" + t[:20], t)
    c.set(b"s:lzf", b"abcdefgh" * 2000)
    c.set(b"s:noise", INCOMPRESSIBLE)
    c.set(b"\x00bin\xffkey", b"\x01\x02")
    c.set(b"s:exp", b"v", pxat=FAR_MS)
    # lists: one listpack node, many nodes, compressed nodes, plain nodes
    c.config_set("list-max-listpack-size", "128")
    c.rpush(b"l:small", *elements)
    c.rpush(b"l:one", b"only")
    c.config_set("list-max-listpack-size", "4")
    c.rpush(b"l:nodes", *elements, *elements)
    c.config_set("list-compress-depth", "1")
    c.rpush(b"l:compressed", *[b"element %d " % (i % 7) * 20 for i in range(200)])
    c.config_set("list-compress-depth", "0")
    c.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "100")
    c.rpush(b"l:plain", b"short", b"p" * 500, b"tiny", b"q" * 300, *elements)
    c.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", str(2**30))
    c.config_set("list-max-listpack-size", "-2")
    c.rpush(b"l:exp", b"a", b"b")
    c.pexpireat(b"l:exp", FAR_MS)
    # sets: intset (16, 32, 64 bit), hashtable
    c.config_set("set-max-intset-entries", "512")
    c.sadd(b"set:int16", 1, -2, 300)
    c.sadd(b"set:int32", 1, 2**20, -(2**30))
    c.sadd(b"set:int64", 1, 2**40, -(2**63))
    c.sadd(b"set:text", *texts)
    c.config_set("set-max-intset-entries", "2")
    c.sadd(b"set:bigint", 1, 2, 3, 4)
    c.config_set("set-max-intset-entries", "512")
    c.sadd(b"set:exp", b"m")
    c.pexpireat(b"set:exp", FAR_MS)
    # zsets: listpack, skiplist (binary doubles)
    scores = [0.0, 1.0, -1.0, 1.5, 1e300, -2.5e-10, float("inf"), float("-inf"), 3.0, 2**53,
              0.1, 12.0, 127.0, -(2**40)]  # fmt: skip
    members = {e: s for e, s in zip(elements, scores * 3, strict=False)}
    c.config_set("zset-max-listpack-entries", "128")
    c.zadd(b"z:small", members)
    c.config_set("zset-max-listpack-entries", "4")
    c.zadd(b"z:big", members)
    c.config_set("zset-max-listpack-entries", "128")
    c.zadd(b"z:exp", {b"m": 1})
    c.pexpireat(b"z:exp", FAR_MS)
    # hashes: listpack, hashtable
    pairs = dict(zip(elements, reversed(elements), strict=True))
    c.config_set("hash-max-listpack-entries", "128")
    c.config_set("hash-max-listpack-value", "8192")
    c.hset(b"h:small", mapping=pairs)
    c.config_set("hash-max-listpack-entries", "4")
    c.hset(b"h:big", mapping=pairs)
    c.config_set("hash-max-listpack-entries", "128")
    c.config_set("hash-max-listpack-value", "64")
    c.hset(b"h:longvalue", mapping={b"f": b"v" * 100})
    c.hset(b"h:exp", b"f", b"v")
    c.pexpireat(b"h:exp", FAR_MS)
    c.execute_command("FUNCTION", "LOAD", LIBRARY)


def _dump(tmp: Path, fill: Any) -> tuple[Path, dict[int, dict[bytes, Entry | None]], set[str]]:
    """Run ``fill`` on a fresh redis-server in db 0 and db 3, SAVE, and return the dump's
    path, what Redis reports for every key, and the encodings its keys had."""
    tmp.mkdir(parents=True, exist_ok=True)
    with redis_server(tmp, "--rdbcompression", "yes", "--enable-debug-command", "yes") as c:
        fill(c)
        port = c.connection_pool.connection_kwargs["port"]
        c3 = redis.Redis(host="127.0.0.1", port=port, db=3)
        try:
            c3.set(b"db3:s", b"in db 3")
            c3.rpush(b"db3:l", b"x")
            c3.set(b"s:raw", b"the same key in db 3", pxat=FAR_MS + 1)
            c.save()
            expected, encodings = {}, set()
            for db, client in ((0, c), (3, c3)):
                keys = sorted(client.scan_iter(count=1000))
                expected[db] = dict(zip(keys, redis_entries(client, keys), strict=True))
                encodings |= {client.object("encoding", k).decode() for k in keys}
        finally:
            c3.close()
    return tmp / "dump.rdb", expected, encodings


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield _dump(tmp_path_factory.mktemp("rdb") / "server", _fill)


def _keys(path: Path) -> dict[int, dict[bytes, RdbKey]]:
    found: dict[int, dict[bytes, RdbKey]] = {}
    for item in read_rdb(path):
        if isinstance(item, RdbKey):
            assert item.key not in found.setdefault(item.db, {}), "a key twice"
            found[item.db][item.key] = item
    return found


def test_every_encoding_matches_redis(dump: Any) -> None:
    path, expected, encodings = dump
    assert encodings >= {"embstr", "int", "raw", "quicklist", "intset", "hashtable",
                         "listpack", "skiplist"}  # fmt: skip
    found = _keys(path)
    assert set(found) == set(expected) == {0, 3}
    for db, keys in expected.items():
        assert set(found[db]) == set(keys)
        for key, entry in keys.items():
            item = found[db][key]
            assert comparable(Entry(item.type, item.value, item.expire_at_ms)) == comparable(
                entry
            ), key
            if item.type == "zset":  # Redis's order: score, then member bytes
                assert item.value.items() == list(entry.value.items()), key  # type: ignore[union-attr]
    assert found[0][b"s:exp"].expire_at_ms == FAR_MS
    assert found[3][b"s:raw"].expire_at_ms == FAR_MS + 1


def test_items_and_order(dump: Any) -> None:
    path = dump[0]
    with open(path, "rb") as file:
        reader = RdbReader(file, path)
        items = list(reader)
        assert file.read() == b""  # stopped right after the CRC
    assert reader.version == 10
    assert reader.checksum == int.from_bytes(path.read_bytes()[-8:], "little") != 0
    aux = {i.name: i.value for i in items if isinstance(i, RdbAux)}
    assert aux[b"redis-ver"].startswith(b"7.0.")
    assert [i.code for i in items if isinstance(i, RdbFunction)] == [LIBRARY]
    sizes = [i for i in items if isinstance(i, RdbResizeDb)]
    keys = [i for i in items if isinstance(i, RdbKey)]
    assert [(s.db, s.keys) for s in sizes] == [(0, sum(k.db == 0 for k in keys)), (3, 3)]
    dbs = [k.db for k in keys]
    assert dbs == sorted(dbs)
    data = path.read_bytes()
    for k in keys:  # each key's record starts at its offset: [0xFC <ms>] <type> <key>
        at = k.offset + (9 if k.expire_at_ms is not None else 0)
        assert data[k.offset] == (0xFC if k.expire_at_ms is not None else data[at])
        assert data[at] in (0, 2, 4, 5, 11, 16, 17, 18), k
        if len(k.key) < 20:  # not LZF-compressed
            assert data[at + 2 : at + 2 + len(k.key)] == k.key


def test_flipped_byte_fails_the_crc(dump: Any, tmp_path: Path) -> None:
    data = bytearray(dump[0].read_bytes())
    at = data.index(INCOMPRESSIBLE[1000:1040]) + 20
    data[at] ^= 0x01
    bad = tmp_path / "flipped.rdb"
    bad.write_bytes(bytes(data))
    with pytest.raises(RdbCorruptionError, match="CRC-64 mismatch") as info:
        list(read_rdb(bad))
    assert isinstance(info.value, CorruptionError)
    assert info.value.offset == len(data) - 8
    assert info.value.path == str(bad)


@pytest.mark.parametrize("cut", [9, 100, 1000, 5000, -9, -8, -3, -1])
def test_truncated_file_is_corrupt(dump: Any, tmp_path: Path, cut: int) -> None:
    data = dump[0].read_bytes()
    bad = tmp_path / "cut.rdb"
    bad.write_bytes(data[:cut])
    with pytest.raises(RdbCorruptionError, match="truncated") as info:
        list(read_rdb(bad))
    assert info.value.offset == len(data[:cut])


def test_truncated_inside_a_key_names_it(dump: Any, tmp_path: Path) -> None:
    data = dump[0].read_bytes()
    bad = tmp_path / "cut.rdb"
    bad.write_bytes(data[: data.index(INCOMPRESSIBLE[:100]) + 50])
    with pytest.raises(RdbCorruptionError, match="in key b's:noise'") as info:
        list(read_rdb(bad))
    assert info.value.key == b"s:noise"


@pytest.mark.parametrize("version", [b"0008", b"0013", b"0001", b"9999"])
def test_other_versions_are_unsupported(dump: Any, version: bytes) -> None:
    data = b"REDIS" + version + dump[0].read_bytes()[9:]
    with pytest.raises(RdbUnsupportedError, match=f"version {int(version)} is not") as info:
        list(RdbReader(io.BytesIO(data), "x.rdb"))
    assert isinstance(info.value, UnsupportedFormatError)
    assert (info.value.path, info.value.offset) == ("x.rdb", 5)


def test_not_an_rdb_file() -> None:
    with pytest.raises(RdbUnsupportedError, match="not a Redis RDB file"):
        list(RdbReader(io.BytesIO(b"*2\r\n$6\r\nSELECT\r\n"), "x.aof"))


def _streams(c: redis.Redis) -> None:
    """Streams in several nodes, same and other fields, deleted entries, consumer groups with
    pending entries, idle consumers, an empty stream, an XSETID'd stream."""
    c.config_set("stream-node-max-entries", "3")
    for i in range(10):
        fields = {b"f": b"%d" % i, b"g": b"x"} if i % 3 else {b"other": b"\x00\xff", b"n": i}
        c.xadd(b"events", fields, id=b"%d-%d" % (1000 + i // 4, i))
    c.xdel(b"events", b"1000-1", b"1001-6")
    c.xgroup_create(b"events", b"g1", id=b"0")
    c.xgroup_create(b"events", b"g2", id=b"1001-5")
    c.xreadgroup(b"g1", b"alice", {b"events": b">"}, count=3)
    c.xreadgroup(b"g1", b"bob", {b"events": b">"}, count=2)
    c.xack(b"events", b"g1", b"1000-2")
    c.xgroup_createconsumer(b"events", b"g2", b"idle")
    c.xgroup_create(b"empty", b"g", id=b"$", mkstream=True)
    c.xadd(b"moved", {b"a": b"1"}, id=b"5-1")
    c.xdel(b"moved", b"5-1")
    c.execute_command("XSETID", b"moved", b"7-0", "ENTRIESADDED", 3, "MAXDELETEDID", b"6-0")
    for i in range(3):
        c.xadd(b"clean", {b"i": i})
    c.xgroup_create(b"clean", b"g", id=b"0")
    c.xreadgroup(b"g", b"c", {b"clean": b">"}, count=2)
    c.xadd(b"expiring", {b"a": b"1"})
    c.pexpireat(b"expiring", FAR_MS)


def _stream_truth(c: redis.Redis, key: bytes) -> Any:
    info = c.xinfo_stream(key)
    groups = []
    for group in c.xinfo_groups(key):
        name = group["name"]
        consumers = {x["name"]: x["pending"] for x in c.xinfo_consumers(key, name)}
        pending = c.xpending_range(key, name, min=b"-", max=b"+", count=100)
        pel = [(p["message_id"], p["consumer"], p["times_delivered"]) for p in pending]
        groups.append((name, group["last-delivered-id"], group["entries-read"], consumers, pel))
    return (c.xrange(key), info["last-generated-id"], info["max-deleted-entry-id"],
            info["entries-added"], info["length"], groups)  # fmt: skip


def _id_bytes(stream_id: tuple[int, int]) -> bytes:
    return b"%d-%d" % stream_id


def _stream_found(item: RdbKey) -> Any:
    meta = item.stream
    assert meta is not None
    groups = []
    for g in meta.groups:
        consumers = {c.name: len(c.pending) for c in g.consumers}
        pending = [(_id_bytes(p.id), p.consumer, p.delivery_count) for p in g.pending]
        groups.append((g.name, _id_bytes(g.last_id), g.entries_read, consumers, pending))
    entries = [(_id_bytes(i), dict(zip(f[::2], f[1::2], strict=True)))
               for i, f in item.value.entries.items()]  # fmt: skip
    return (entries, _id_bytes(item.value.last_id), _id_bytes(meta.max_deleted_id),
            meta.entries_added, meta.length, groups)  # fmt: skip


def test_streams_match_redis(tmp_path: Path) -> None:
    truth: dict[bytes, Any] = {}

    def fill(c: redis.Redis) -> None:
        _streams(c)
        for key in (b"events", b"empty", b"moved", b"clean", b"expiring"):
            truth[key] = _stream_truth(c, key)

        raw = raw_client(c)
        for key in truth:
            whole[key] = redis_stream(raw, key)
        raw.close()

    whole: dict[bytes, Any] = {}
    path, expected, _ = _dump(tmp_path / "server", fill)
    found = _keys(path)[0]
    for key, want in truth.items():
        item = found[key]
        assert (item.type, item.expire_at_ms) == ("stream", expected[0][key].expire_at_ms)
        assert _stream_found(item) == want, key
        # the whole stream, times included, as XINFO STREAM FULL shows it
        assert stream_state(complete_stream(item, str(path))) == whole[key], key
    assert truth[b"events"][5][0][3] == {b"alice": 2, b"bob": 2}  # the test saw pending entries
    assert truth[b"clean"][5][0][2] == 2  # and a known entries-read
    assert found[b"events"].stream.groups[1].consumers[0].name == b"idle"  # type: ignore[union-attr]


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
        [(b"5-10", [b"f", b"v0"]), (b"6-10", [b"a", b"1", b"b", b"2"])], b"6-10",
        b"5-11" if v2 else b"0-0", 3 if v2 else 2,
        [(b"g", b"6-10", 3 if v2 else 2, [(b"5-10", b"c", 1234, 2)], [(b"c", 99)])],
    )  # fmt: skip


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
    assert item.value == HANDMADE["list ziplist"][1]  # type: ignore[union-attr]


def test_crc_zero_is_not_checked() -> None:
    data = _rdb(_key(0, b"k", _str(b"v")), crc=False)
    assert [i.key for i in RdbReader(io.BytesIO(data), "h.rdb")] == [b"k"]  # type: ignore[union-attr]


def test_aof_base_rdb(tmp_path: Path) -> None:
    """The RDB base file of a Redis 7 AOF (``aof-use-rdb-preamble yes``, the default), read
    to its end; its keys are what Redis holds."""
    workdir = tmp_path / "server"
    workdir.mkdir()
    with redis_server(workdir, "--appendonly", "yes", "--aof-use-rdb-preamble", "yes") as c:
        c.set(b"s", b"v", pxat=FAR_MS)
        c.rpush(b"l", b"a", 1)
        c.hset(b"h", b"f", b"v")
        c.xadd(b"x", {b"f": b"v"}, id=b"1-1")
        c.bgrewriteaof()
        deadline = time.monotonic() + 30
        while c.info("persistence")["aof_rewrite_in_progress"] or not list(
            (workdir / "appendonlydir").glob("*.base.rdb")
        ):
            assert time.monotonic() < deadline, "BGREWRITEAOF did not finish"
            time.sleep(0.05)
        keys = [b"h", b"l", b"s", b"x"]
        expected = dict(zip(keys, redis_entries(c, keys), strict=True))
    (base,) = (workdir / "appendonlydir").glob("*.base.rdb")
    items = list(read_rdb(base))
    assert RdbAux(b"aof-base", b"1") in items
    found = {i.key: i for i in items if isinstance(i, RdbKey)}
    assert sorted(found) == keys
    for key in (b"h", b"l", b"s"):
        item = found[key]
        assert comparable(Entry(item.type, item.value, item.expire_at_ms)) == comparable(
            expected[key]
        )
    assert list(found[b"x"].value.entries.items()) == [((1, 1), [b"f", b"v"])]
