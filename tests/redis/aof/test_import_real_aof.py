"""Importing the real Redis 7 AOF (fixtures/redis-aof/, copied from a redis-server 7.0.15 run):
counts, keys, transactions, databases, reruns, damage, and the keyspace a real redis-server
holds after loading it."""

from __future__ import annotations

import base64
import shutil
from collections import Counter
from pathlib import Path

import orjson
import pytest

import moonish
from moonish.errors import InvalidArgumentError, UnsupportedFormatError
from moonish.log.payloads import decode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import KvChange, position_marker
from moonish.redis.aof.files import AofFormatError, read_manifest
from moonish.redis.aof.importer import import_aof
from moonish.redis.rdb.reader import RdbCorruptionError
from moonish.slots import hash_slot
from tests.support.redis.aof import (
    FIXTURES,
    INCR,
    MIXED,
    SLICE,
    all_envelopes,
    aof_commands,
    copy_aof,
    resp,
    tree,
)
from tests.support.redis.slots import crc16_xmodem
from tests.support.servers.redis_server import comparable, redis_entry, redis_server, shard_writer


def keys_of(argv: list[bytes]) -> list[bytes]:
    name = argv[0].upper()
    if name in (b"DEL", b"UNLINK"):
        return argv[1:]
    if name == b"MSET":
        return argv[1::2]
    if name == b"RENAME":
        return argv[1:3]
    return [argv[1]]


def key_bytes(key: str | dict) -> bytes:
    return base64.b64decode(key["_b64"]) if isinstance(key, dict) else key.encode()


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
        lsns = [e["source"]["lsn"] for e in shard_envelopes]
        unseen = set(range(1, report.per_shard[shard] + 1)) - set(lsns)
        assert lsns == sorted(lsns) and unseen == position_markers(tmp_path / f"shard-{shard}")
        for e in shard_envelopes:
            image = e["after"] or e["before"]
            assert crc16_xmodem(key_bytes(image["key"])) % 16384 * 4 // 16384 == shard
    named = {key for c in writes for key in keys_of(c)}
    for shard_envelopes in envelopes:
        assert_op_sequences(shard_envelopes)
        assert {key_bytes((e["after"] or e["before"])["key"]) for e in shard_envelopes} <= named


def position_markers(shard_dir: Path) -> set[int]:
    """LSNs of the records that only carry a source position (readers skip them)."""
    markers = set()
    with ShardReader(shard_dir) as reader:
        reader.seek(1)
        while frames := reader.poll(4096):
            for frame in frames:
                record = decode_payload(frame.record_type, frame.payload)
                if isinstance(record, KvChange) and record == position_marker(record.source):
                    markers.add(frame.lsn)
    return markers


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


def test_running_again_writes_nothing_and_a_new_shard_count_is_refused(tmp_path: Path) -> None:
    aof = copy_aof(tmp_path, b"".join(resp(b"INCR", b"n%d" % i) for i in range(40)))
    first = import_aof(aof, tmp_path / "data", 2)
    second = import_aof(aof, tmp_path / "data", 2)
    assert sum(first.per_shard) == 40 + 1 and first.commands == 40  # + a position marker
    assert second.per_shard == [0, 0] and second.records == 0 and second.commands == 0
    assert second.resumed_from == [f"{INCR}@{(aof / INCR).stat().st_size}"] * 2
    envelopes = [e for es in all_envelopes(tmp_path / "data", 2) for e in es]
    assert Counter(e["op"] for e in envelopes) == {"c": 40}
    with pytest.raises(InvalidArgumentError, match="2 shards"):
        import_aof(aof, tmp_path / "data", 3)


@pytest.mark.slow
def test_the_whole_real_aof_imports(tmp_path: Path) -> None:
    report = import_aof(MIXED, tmp_path, 4)
    assert report.commands == 43896 and report.transactions == 50
    assert report.truncated_tail is None and report.bytes == (MIXED / INCR).stat().st_size


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


def test_a_damaged_rdb_base_is_an_error_that_leaves_nothing(tmp_path: Path) -> None:
    aof = copy_aof(tmp_path, (SLICE / INCR).read_bytes())
    (aof / "appendonly.aof.1.base.aof").write_bytes(b"REDIS0011\xfa\x09redis-ver")
    before = tree(tmp_path)
    with pytest.raises(RdbCorruptionError, match="truncated RDB file") as info:
        import_aof(aof, tmp_path / "data", 2)
    assert info.value.path == str(aof / "appendonly.aof.1.base.aof") and info.value.offset == 20
    assert tree(tmp_path) == before


def test_a_script_is_refused_even_when_skipping(tmp_path: Path) -> None:
    """Redis 7 propagates a script's writes, never EVAL/FCALL: one in an AOF is refused by
    name, with the file and offset, even with skip_unsupported."""
    head = resp(b"SET", b"k", b"v")
    aof = copy_aof(tmp_path, head + resp(b"FCALL", b"f", b"1", b"k"))
    for skip in (False, True):
        with pytest.raises(UnsupportedFormatError, match="FCALL never appears") as info:
            import_aof(aof, tmp_path / f"data{skip}", 1, skip_unsupported=skip)
        assert (info.value.path, info.value.offset) == (str(aof / INCR), len(head))


def test_flushall_removes_every_key_of_every_shard(tmp_path: Path) -> None:
    sets = b"".join(resp(b"SET", b"k%d" % i, b"v") for i in range(30))
    aof = copy_aof(tmp_path, sets + resp(b"SELECT", b"3") + sets + resp(b"FLUSHALL"))
    report = import_aof(aof, tmp_path / "data", 3)
    flushed = [
        e
        for es in all_envelopes(tmp_path / "data", 3)
        for e in es
        if e["source"]["command"] == "FLUSHALL"
    ]
    assert all(e["op"] == "d" and e["after"] is None for e in flushed)
    assert {(e["before"]["db"], e["before"]["key"]) for e in flushed} >= {
        (db, f"k{i}") for db in (0, 3) for i in range(30)
    }
    assert report.records == sum(report.per_shard)


@pytest.mark.redis
def test_imported_aof_equals_redis_loading_it(tmp_path: Path) -> None:
    """The whole real AOF: moonish's import (4 shards) holds the keyspace redis-server has
    after loading the same files, in every db, values and expiry times."""
    copy = tmp_path / "redis"
    shutil.copytree(FIXTURES / "mixed", copy)
    report = import_aof(FIXTURES / "mixed" / "appendonlydir", tmp_path / "data", 4)
    assert report.records > report.commands
    ours = {}
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        with shard_writer(Path(shard_dir)) as writer:
            ours.update({(db, k): comparable(e) for db, k, e in writer.keyspace.items()})
    with redis_server(copy, "--appendonly", "yes", "--appenddirname", "appendonlydir") as client:
        theirs = {}
        for db in (0, 1, 2, 3):
            client.execute_command("SELECT", db)
            for key in client.scan_iter(count=1000):
                entry = redis_entry(client, key)
                if entry is not None:
                    theirs[(db, key)] = comparable(entry)
    assert len(theirs) > 5000
    assert ours == theirs
