"""Importing the real Redis 7 AOF (fixtures/redis-aof/, copied from a redis-server 7.0.15 run)."""

from __future__ import annotations

import base64
import shutil
from collections import Counter
from pathlib import Path

import hiredis
import orjson
import pytest

import moonish.api
from moonish.errors import InvalidArgumentError, UnsupportedFormatError
from moonish.redis.aof import AofFormatError, read_manifest
from moonish.redis.importer import import_aof
from moonish.redis.slots import hash_slot, shard_of_slot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "redis-aof"
SLICE = FIXTURES / "slice" / "appendonlydir"
MIXED = FIXTURES / "mixed" / "appendonlydir"
INCR = "appendonly.aof.1.incr.aof"


def crc16_xmodem(data: bytes) -> int:
    """Bit-by-bit CRC16-XMODEM, independent of the code under test (Redis Cluster spec)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def aof_commands(directory: Path) -> list[list[bytes]]:
    reader = hiredis.Reader()
    reader.feed((directory / INCR).read_bytes())
    commands = []
    while (item := reader.gets()) is not False:
        commands.append(item)
    return commands


def keys_of(argv: list[bytes]) -> list[bytes]:
    name = argv[0].upper()
    if name in (b"DEL", b"UNLINK"):
        return argv[1:]
    if name == b"MSET":
        return argv[1::2]
    if name == b"RENAME":
        return argv[1:3]
    return [argv[1]]


def all_envelopes(data_dir: Path, shards: int) -> list[list[dict]]:
    return [
        [orjson.loads(e.envelope) for e in moonish.api.tail(data_dir / f"shard-{k}")]
        for k in range(shards)
    ]


def key_bytes(key: str | dict) -> bytes:
    return base64.b64decode(key["_b64"]) if isinstance(key, dict) else key.encode()


@pytest.mark.parametrize(
    ("key", "slot"),
    [(b"foo", 12182), (b"bar", 5061), (b"{user1000}.following", hash_slot(b"user1000"))],
)
def test_hash_slots_match_redis_cluster(key: bytes, slot: int) -> None:
    assert hash_slot(key) == slot


@pytest.mark.parametrize(
    ("key", "hashed"),
    [
        (b"foo{}{bar}", b"foo{}{bar}"),  # empty tag: the whole key
        (b"foo{{bar}}zap", b"{bar"),  # up to the first } after the first {
        (b"foo{bar}{zap}", b"bar"),  # only the first tag
        (b"\xff{\x00\x01}x", b"\x00\x01"),
    ],
)
def test_hash_tags_follow_the_cluster_spec(key: bytes, hashed: bytes) -> None:
    assert hash_slot(key) == crc16_xmodem(hashed) % 16384


def test_slot_ranges_are_contiguous_and_even() -> None:
    assert [shard_of_slot(s, 4) for s in (0, 4095, 4096, 8191, 8192, 12287, 12288, 16383)] == [
        0, 0, 1, 1, 2, 2, 3, 3,
    ]  # fmt: skip


def test_manifest_order_is_base_then_incr_by_seq(tmp_path: Path) -> None:
    (tmp_path / "x.manifest").write_text(
        "file a.2.incr.aof seq 2 type i\nfile a.1.base.aof seq 1 type b\n"
        "file a.0.base.aof seq 0 type h\nfile a.1.incr.aof seq 1 type i\n"
    )
    assert [f.name for f in read_manifest(str(tmp_path))] == [
        "a.1.base.aof",
        "a.1.incr.aof",
        "a.2.incr.aof",
    ]


def test_import_counts_per_command_and_per_shard(tmp_path: Path) -> None:
    commands = aof_commands(SLICE)
    writes = [c for c in commands if c[0].upper() not in (b"SELECT", b"MULTI", b"EXEC")]
    report = import_aof(SLICE, tmp_path, 4)
    assert report.commands == len(writes)
    assert report.per_command == Counter(c[0].upper().decode() for c in writes)
    assert report.transactions == sum(c[0].upper() == b"MULTI" for c in commands) == 50
    assert report.records == sum(report.per_shard)
    assert report.lsn_ranges == [(1, n) for n in report.per_shard]

    envelopes = all_envelopes(tmp_path, 4)
    for shard, shard_envelopes in enumerate(envelopes):
        assert [e["source"]["lsn"] for e in shard_envelopes] == list(
            range(1, len(shard_envelopes) + 1)
        )
        for e in shard_envelopes:
            image = e["after"] or e["before"]
            assert crc16_xmodem(key_bytes(image["key"])) % 16384 * 4 // 16384 == shard
    named = {key for c in writes for key in keys_of(c)}
    for shard_envelopes in envelopes:
        assert_op_sequences(shard_envelopes)
        assert {key_bytes((e["after"] or e["before"])["key"]) for e in shard_envelopes} <= named


def assert_op_sequences(envelopes: list[dict]) -> None:
    """Per key: c first and after each d, u and d only while it exists, images chained
    (each before image is the previous after image)."""
    state: dict[tuple[int, str], dict | None] = {}
    for e in envelopes:
        image = e["after"] or e["before"]
        key = (image["db"], orjson.dumps(image["key"]).decode())
        previous = state.get(key)
        expected = "c" if previous is None else ("d" if e["after"] is None else "u")
        assert e["op"] == expected, (e, previous)
        if previous is not None:
            assert e["before"] == previous
        state[key] = e["after"]


def test_binary_and_non_ascii_keys_survive(tmp_path: Path) -> None:
    import_aof(SLICE, tmp_path, 2)
    keys = {
        key_bytes((e["after"] or e["before"])["key"])
        for es in all_envelopes(tmp_path, 2)
        for e in es
    }
    expected = {key for c in aof_commands(SLICE) if c[0] == b"SET" for key in [c[1]]}
    binary = {k for k in expected if not _utf8(k)}
    assert binary and binary <= keys
    assert "übergröße:ключ".encode() in keys


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_multi_exec_blocks_stay_atomic_per_shard(tmp_path: Path) -> None:
    import_aof(SLICE, tmp_path, 4)
    envelopes = [e for es in all_envelopes(tmp_path, 4) for e in es]
    incrby = [e for e in envelopes if e["source"]["command"] == "INCRBY"]
    hincrby = [e for e in envelopes if e["source"]["command"] == "HINCRBY"]
    assert len(incrby) == len(hincrby) == 50
    same_shard = hash_slot(b"counter:orders") * 4 // 16384 == hash_slot(b"stats") * 4 // 16384
    for a, b in zip(incrby, hincrby, strict=True):
        assert a["transaction"] is not None and b["transaction"] is not None
        if same_shard:
            assert a["transaction"]["id"] == b["transaction"]["id"]
            assert (a["transaction"]["total_order"], b["transaction"]["total_order"]) == (1, 2)
    plain = [e for e in envelopes if e["source"]["command"] == "APPEND"]
    assert plain and all(e["transaction"] is None for e in plain)


def test_multi_key_commands_become_one_record_per_key(tmp_path: Path) -> None:
    import_aof(SLICE, tmp_path, 1)
    envelopes = all_envelopes(tmp_path, 1)[0]
    deletes = [
        e for e in envelopes if e["source"]["command"] == "DEL" and not e["source"]["expired"]
    ]
    assert deletes and all(e["op"] == "d" for e in deletes)
    two_key = [e for e in deletes if e["transaction"] and e["transaction"]["total_order"] == 2]
    assert two_key, "DEL k1 k2 is an atomic batch of two records"
    mset = [e for e in envelopes if e["source"]["command"] == "MSET"]
    msets = [c for c in aof_commands(SLICE) if c[0] == b"MSET"]
    assert len(mset) == sum(len(set(c[1::2])) for c in msets)  # a repeated key: one record
    assert all(e["after"]["type"] == "string" for e in mset)
    renames = [e for e in envelopes if e["source"]["command"] == "RENAME"]
    assert [e["op"] for e in renames[:2]] == ["d", "c"]
    assert renames[0]["before"]["value"] == renames[1]["after"]["value"]


def test_select_sets_the_db_of_following_records(tmp_path: Path) -> None:
    import_aof(SLICE, tmp_path, 1)
    envelopes = all_envelopes(tmp_path, 1)[0]
    in_db2 = [e for e in envelopes if e["source"]["db"] == 2]
    assert {(e["after"] or e["before"])["key"] for e in in_db2} == {"db2:key"}
    assert all((e["after"] or e["before"])["db"] == 2 for e in in_db2)
    assert len(in_db2) < len(envelopes) and {e["source"]["db"] for e in envelopes} == {0, 2}


def test_running_again_appends_and_lsns_continue(tmp_path: Path) -> None:
    aof = copy_aof(tmp_path, b"".join(resp(b"INCR", b"n%d" % i) for i in range(40)))
    first = import_aof(aof, tmp_path / "data", 2)
    second = import_aof(aof, tmp_path / "data", 2)
    assert second.per_shard == first.per_shard
    assert second.lsn_ranges == [(n + 1, 2 * n) for n in first.per_shard]
    envelopes = [e for es in all_envelopes(tmp_path / "data", 2) for e in es]
    assert Counter(e["op"] for e in envelopes) == {"c": 40, "u": 40}
    with pytest.raises(InvalidArgumentError, match="2 shards"):
        import_aof(aof, tmp_path / "data", 3)


def resp(*argv: bytes) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def test_the_whole_real_aof_imports(tmp_path: Path) -> None:
    report = import_aof(MIXED, tmp_path, 4)
    assert report.commands == 43896 and report.transactions == 50
    assert report.truncated_tail is None and report.bytes == (MIXED / INCR).stat().st_size


def copy_aof(tmp_path: Path, data: bytes) -> Path:
    target = tmp_path / "appendonlydir"
    shutil.copytree(SLICE, target)
    (target / INCR).write_bytes(data)
    return target


def test_truncated_last_command_is_left_out_and_reported(tmp_path: Path) -> None:
    data = (SLICE / INCR).read_bytes()
    aof = copy_aof(tmp_path, data[:-7])
    report = import_aof(aof, tmp_path / "data", 1)
    assert report.commands == import_aof(SLICE, tmp_path / "full", 1).commands - 1
    assert report.truncated_tail and "incomplete command" in report.truncated_tail


def test_unfinished_multi_at_the_end_is_left_out_whole(tmp_path: Path) -> None:
    data = (SLICE / INCR).read_bytes()
    cut = data.rindex(b"*1\r\n$4\r\nEXEC\r\n")
    aof = copy_aof(tmp_path, data[:cut])
    report = import_aof(aof, tmp_path / "data", 1)
    kept = aof_commands(aof)
    last_multi = max(i for i, c in enumerate(kept) if c[0] == b"MULTI")
    applied = [c for c in kept[:last_multi] if c[0] not in (b"SELECT", b"MULTI", b"EXEC")]
    assert len(kept) - last_multi - 1 == 3  # INCRBY, LPUSH, HINCRBY
    assert report.transactions == 49 and report.commands == len(applied)
    assert report.truncated_tail and "unfinished MULTI of 3" in report.truncated_tail


def test_garbage_in_the_middle_is_an_error_with_its_offset(tmp_path: Path) -> None:
    data = (SLICE / INCR).read_bytes()
    offset = data.index(b"*3\r\n$4\r\nXADD"[:4], 5000)
    aof = copy_aof(tmp_path, data[:offset] + b"?garbage\r\n" + data[offset:])
    with pytest.raises(AofFormatError) as info:
        import_aof(aof, tmp_path / "data", 1)
    assert info.value.offset == offset and info.value.path == str(aof / INCR)


def test_annotations_are_skipped_like_redis_does(tmp_path: Path) -> None:
    data = (SLICE / INCR).read_bytes()
    aof = copy_aof(tmp_path, b"#TS:1795264137\r\n" + data)
    assert (
        import_aof(aof, tmp_path / "a", 1).records == import_aof(SLICE, tmp_path / "b", 1).records
    )


def test_rdb_preamble_is_refused(tmp_path: Path) -> None:
    aof = copy_aof(tmp_path, (SLICE / INCR).read_bytes())
    (aof / "appendonly.aof.1.base.aof").write_bytes(b"REDIS0011\xfa\x09redis-ver")
    with pytest.raises(UnsupportedFormatError, match="RDB preamble"):
        import_aof(aof, tmp_path / "data", 1)


def test_a_command_without_a_routable_key_is_refused(tmp_path: Path) -> None:
    aof = copy_aof(tmp_path, b"*3\r\n$6\r\nSWAPDB\r\n$1\r\n0\r\n$1\r\n1\r\n")
    with pytest.raises(UnsupportedFormatError, match="SWAPDB"):
        import_aof(aof, tmp_path / "data", 1)


def test_flushall_removes_every_key_of_every_shard(tmp_path: Path) -> None:
    sets = b"".join(resp(b"SET", b"k%d" % i, b"v") for i in range(30))
    aof = copy_aof(tmp_path, sets + resp(b"SELECT", b"3") + sets + resp(b"FLUSHALL"))
    report = import_aof(aof, tmp_path / "data", 3)
    flushed = [
        e for es in all_envelopes(tmp_path / "data", 3) for e in es
        if e["source"]["command"] == "FLUSHALL"
    ]  # fmt: skip
    assert all(e["op"] == "d" and e["after"] is None for e in flushed)
    assert {(e["before"]["db"], e["before"]["key"]) for e in flushed} >= {
        (db, f"k{i}") for db in (0, 3) for i in range(30)
    }
    assert report.records == sum(report.per_shard)
