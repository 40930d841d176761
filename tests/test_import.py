"""Importing the real Redis 7 AOF (fixtures/redis-aof/, copied from a redis-server 7.0.15 run)."""

from __future__ import annotations

import base64
import errno
import os
import re
import resource
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import hiredis
import orjson
import pytest

import moonish.redis.routing.shards
from moonish.cdc import shard_read
from moonish.errors import InvalidArgumentError, UnavailableError, UnsupportedFormatError
from moonish.log.payloads import decode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import KvChange, position_marker
from moonish.redis.aof.files import AofFormatError, read_manifest
from moonish.redis.aof.importer import import_aof
from moonish.redis.rdb.reader import RdbCorruptionError
from moonish.slots import hash_slot, shard_of_slot
from moonish.state.shard import ShardWriter

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
        [orjson.loads(e.envelope) for e in shard_read.tail(data_dir / f"shard-{k}")]
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
        e for es in all_envelopes(tmp_path / "data", 3) for e in es
        if e["source"]["command"] == "FLUSHALL"
    ]  # fmt: skip
    assert all(e["op"] == "d" and e["after"] is None for e in flushed)
    assert {(e["before"]["db"], e["before"]["key"]) for e in flushed} >= {
        (db, f"k{i}") for db in (0, 3) for i in range(30)
    }
    assert report.records == sum(report.per_shard)


ROOT = Path(__file__).resolve().parent.parent
MOONISH = [sys.executable, "-c", "from cli.main import entry; entry()"]


def import_cli(
    target: Path, shards: int, nofile: tuple[int, int] | None = None, aof: Path = SLICE
) -> subprocess.CompletedProcess[bytes]:
    """``moonish wal import-aof`` in a child process, with ``RLIMIT_NOFILE`` (soft, hard)."""

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    return subprocess.run(
        [*MOONISH, "wal", "import-aof", str(aof), str(target), "--shards", str(shards)],
        capture_output=True, timeout=120, check=False, cwd=ROOT, preexec_fn=limit,
    )  # fmt: skip


def tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def test_a_hard_descriptor_limit_too_low_refuses_before_creating_anything(
    tmp_path: Path,
) -> None:
    out = import_cli(tmp_path / "data", 400, nofile=(256, 256))
    assert out.returncode == 2, out.stderr
    assert out.stdout == b"" and b"Traceback" not in out.stderr
    lines = out.stderr.decode().splitlines()
    assert len(lines) == 1, lines  # no progress bar before the refusal
    needed = re.fullmatch(
        r"moonish: invalid_argument: importing into 400 shards needs (\d+) open file "
        r"descriptors \(3 per shard plus (\d+) for the process\), but this process may open "
        r"only 256 \(RLIMIT_NOFILE hard limit\); raise the limit to at least \1 "
        r"\(ulimit -n \1\) or import into at most (\d+) shards; nothing was created",
        lines[0],
    )
    assert needed, lines[0]
    total, others, fit = map(int, needed.groups())
    assert total == 3 * 400 + others and 3 * fit + others <= 256 < 3 * (fit + 1) + others
    assert not (tmp_path / "data").exists()


def test_a_low_soft_descriptor_limit_is_raised_up_to_the_hard_limit(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard == resource.RLIM_INFINITY or hard >= 4096, f"hard RLIMIT_NOFILE {hard} < 4096"
    out = import_cli(tmp_path / "data", 400, nofile=(256, 4096))
    assert out.returncode == 0, out.stderr
    summary = orjson.loads(out.stdout)
    writes = [c for c in aof_commands(SLICE) if c[0].upper() not in (b"SELECT", b"MULTI", b"EXEC")]
    assert summary["commands"] == len(writes) and len(summary["per_shard"]) == 400
    assert summary["records"] == sum(summary["per_shard"]) > 0
    assert len(list((tmp_path / "data").glob("shard-*"))) == 400


def test_a_soft_limit_that_cannot_be_raised_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(resource_: int, limits: tuple[int, int]) -> None:
        raise ValueError("not allowed to raise maximum limit")

    monkeypatch.setattr(resource, "getrlimit", lambda _: (64, resource.RLIM_INFINITY))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    with pytest.raises(InvalidArgumentError, match=r"may open only 64 \(RLIMIT_NOFILE soft"):
        import_aof(SLICE, tmp_path / "data", 40)
    assert tree(tmp_path) == []


def failing_writers(
    monkeypatch: pytest.MonkeyPatch, fail_at: int, error: BaseException
) -> list[ShardWriter]:
    """Make the importer's ``fail_at``-th shard writer fail with ``error`` after making its
    directory and LOCK file (as a writer running out of descriptors does); returns the
    writers that opened."""
    real = ShardWriter
    opened: list[ShardWriter] = []

    def writer(shard_dir: str, *args: object) -> ShardWriter:
        if len(opened) == fail_at:
            os.makedirs(shard_dir, exist_ok=True)
            Path(shard_dir, "LOCK").touch()
            raise error
        opened.append(real(shard_dir, *args))  # type: ignore[arg-type]
        return opened[-1]

    monkeypatch.setattr(moonish.redis.routing.shards, "ShardWriter", writer)
    return opened


def test_running_out_of_descriptors_while_opening_is_an_error_that_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = str(tmp_path / "out" / "data" / "shard-3" / "LOCK")
    opened = failing_writers(monkeypatch, 3, OSError(errno.EMFILE, "Too many open files", lock))
    with pytest.raises(
        UnavailableError, match="cannot open shard 3 of 8: Too many open files"
    ) as info:
        import_aof(SLICE, tmp_path / "out" / "data", 8)
    assert info.value.path == lock and info.value.kind == "unavailable"
    assert len(opened) == 3  # closed again: the descriptor guard checks it
    assert tree(tmp_path) == []  # shard-0..3, data and out were all made by the import


def test_a_late_failure_keeps_the_shards_that_were_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    import_aof(SLICE, data, 2)
    before = [[e["source"] for e in es] for es in all_envelopes(data, 2)]
    failing_writers(monkeypatch, 1, OSError(errno.ENFILE, "Too many open files in system"))
    with pytest.raises(UnavailableError, match="open files in system") as info:
        import_aof(SLICE, data, 2)
    assert info.value.path == str(data / "shard-1")
    monkeypatch.undo()
    assert [[e["source"] for e in es] for es in all_envelopes(data, 2)] == before
    assert (data / "source.json").exists()


def import_into_a_shard(tmp_path: Path) -> tuple[Path, Path]:
    import_aof(SLICE, tmp_path / "data", 2)
    return SLICE, tmp_path / "data" / "shard-0"


def import_inside_a_shard(tmp_path: Path) -> tuple[Path, Path]:
    import_aof(SLICE, tmp_path / "data", 2)
    return SLICE, tmp_path / "data" / "shard-1" / "more"


def import_as_a_new_shard(tmp_path: Path) -> tuple[Path, Path]:
    import_aof(SLICE, tmp_path / "data", 2)
    return SLICE, tmp_path / "data" / "shard-2"


def import_into_the_aof(tmp_path: Path) -> tuple[Path, Path]:
    aof = copy_aof(tmp_path, (SLICE / INCR).read_bytes())
    return aof, aof


def import_inside_the_aof(tmp_path: Path) -> tuple[Path, Path]:
    aof = copy_aof(tmp_path, (SLICE / INCR).read_bytes())
    return aof, aof / "data"


def import_around_the_aof(tmp_path: Path) -> tuple[Path, Path]:
    aof = tmp_path / "data" / "shard-0" / "appendonlydir"
    shutil.copytree(SLICE, aof)
    return aof, tmp_path / "data"


def import_into_a_file(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data").write_bytes(b"not a directory")
    return SLICE, tmp_path / "data"


def import_under_a_file(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data").write_bytes(b"not a directory")
    return SLICE, tmp_path / "data" / "sub"


def import_into_other_shards(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data" / "shard-0").mkdir(parents=True)
    (tmp_path / "data" / "shard-7").mkdir()
    return SLICE, tmp_path / "data"


def import_next_to_a_shard_file(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "shard-notes.txt").write_text("mine")
    return SLICE, tmp_path / "data"


def import_a_missing_aof_file(tmp_path: Path) -> tuple[Path, Path]:
    aof = copy_aof(tmp_path, b"")
    (aof / INCR).unlink()
    return aof, tmp_path / "data"


def import_an_rdb_incremental_file(tmp_path: Path) -> tuple[Path, Path]:
    aof = copy_aof(tmp_path, b"REDIS0011\xfa\x09redis-ver")
    return aof, tmp_path / "data"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (import_into_a_shard, "this is a shard directory (it holds WAL files), not a data dir"),
        (import_inside_a_shard, "the data directory would be inside the shard directory "),
        (import_as_a_new_shard, "this is a shard of the data directory "),
        (import_into_the_aof, "the data directory is the AOF directory; pass a directory of"),
        (import_inside_the_aof, "the data directory is inside the AOF directory "),
        (import_around_the_aof, "the AOF directory is inside shard-0 of the data directory"),
        (import_into_a_file, "the data directory exists and is not a directory"),
        (import_under_a_file, "the data directory cannot be created: "),
        (import_into_other_shards, "the data directory holds shard-7; an import into 2 shards"),
        (import_next_to_a_shard_file, "the data directory holds 'shard-notes.txt', which is not a"),
        (import_a_missing_aof_file, "an AOF file listed in the manifest is missing"),
        (import_an_rdb_incremental_file, "an incremental AOF file starts with an RDB header"),
    ],
)
def test_nonsensical_targets_are_refused_before_creating_anything(
    tmp_path: Path, setup: Callable[[Path], tuple[Path, Path]], message: str
) -> None:
    aof, target = setup(tmp_path)
    before = tree(tmp_path)
    with pytest.raises((InvalidArgumentError, UnsupportedFormatError)) as info:
        import_aof(aof, target, 2)
    assert info.value.message.startswith(message), info.value.message
    named = [target] + [aof / name for name in (INCR, "appendonly.aof.1.base.aof")]
    assert info.value.path in [str(path) for path in named]
    assert tree(tmp_path) == before


def test_the_cli_refuses_a_shard_directory_in_one_line(tmp_path: Path) -> None:
    import_aof(SLICE, tmp_path / "data", 2)
    shard = tmp_path / "data" / "shard-0"
    before = tree(tmp_path)
    out = import_cli(shard, 2)
    assert out.returncode == 2 and out.stdout == b""
    assert out.stderr.decode() == (
        "moonish: invalid_argument: this is a shard directory (it holds WAL files), not a data "
        "directory; pass the directory that holds the shard-<k> directories, or a new directory "
        f"({shard})\n"
    )
    assert tree(tmp_path) == before
