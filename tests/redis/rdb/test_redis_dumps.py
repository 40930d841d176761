"""The RDB reader (moonish.redis.rdb.reader) against dump.rdb files a real redis-server wrote with
every type in every encoding it uses, damaged and cut short, and the RDB base file of a Redis 7
AOF."""

from __future__ import annotations

import io
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from moonish.errors import CorruptionError, UnsupportedFormatError
from moonish.redis.rdb.reader import (
    RdbAux,
    RdbCorruptionError,
    RdbFunction,
    RdbKey,
    RdbReader,
    RdbResizeDb,
    RdbUnsupportedError,
    read_rdb,
)
from moonish.redis.rdb.streams import complete_stream
from moonish.values.model import Entry
from tests.support.redis.rdb_dumps import FAR_MS, INCOMPRESSIBLE, LIBRARY, fill_every_encoding
from tests.support.servers.redis_server import (
    comparable,
    raw_client,
    redis_entries,
    redis_server,
    redis_stream,
    stream_state,
)

pytestmark = pytest.mark.redis


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
    yield _dump(tmp_path_factory.mktemp("rdb") / "server", fill_every_encoding)


def _keys(path: Path) -> dict[int, dict[bytes, RdbKey]]:
    found: dict[int, dict[bytes, RdbKey]] = {}
    for item in read_rdb(path):
        if isinstance(item, RdbKey):
            assert item.key not in found.setdefault(item.db, {}), "a key twice"
            found[item.db][item.key] = item
    return found


def test_every_encoding_matches_redis(dump: Any) -> None:
    path, expected, encodings = dump
    assert encodings >= {
        "embstr",
        "int",
        "raw",
        "quicklist",
        "intset",
        "hashtable",
        "listpack",
        "skiplist",
    }
    found = _keys(path)
    assert set(found) == set(expected) == {0, 3}
    for db, keys in expected.items():
        assert set(found[db]) == set(keys)
        for key, entry in keys.items():
            item = found[db][key]
            assert comparable(Entry(item.type, item.value, item.expire_at_ms)) == comparable(
                entry
            ), key
            if item.type == "list":  # read into the form whose ends are O(1)
                assert isinstance(item.value, deque), key
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
    return (
        c.xrange(key),
        info["last-generated-id"],
        info["max-deleted-entry-id"],
        info["entries-added"],
        info["length"],
        groups,
    )


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
    entries = [
        (_id_bytes(i), dict(zip(f[::2], f[1::2], strict=True)))
        for i, f in item.value.entries.items()
    ]
    return (
        entries,
        _id_bytes(item.value.last_id),
        _id_bytes(meta.max_deleted_id),
        meta.entries_added,
        meta.length,
        groups,
    )


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
