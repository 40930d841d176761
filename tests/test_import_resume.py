"""Imports that can be retried (issue 11 §3) and Redis's default AOF (an RDB base file):
positions stored with the records, reruns that apply every command exactly once, an AOF Redis
appended to or rewrote, a data directory that remembers its source, and `wal import-rdb`."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

import moonish
from moonish.cdc import shard_read
from moonish.errors import CommandError, UnsupportedFormatError
from moonish.redis.aof.importer import import_aof
from moonish.redis.rdb.reader import RdbCorruptionError
from moonish.redis.rdbimport.importer import import_rdb
from moonish.redis.routing.router import ResumeError
from moonish.redis.routing.sources import SourceMismatchError
from moonish.state.shard import ShardWriter
from moonish.values.model import Entry
from tests.redis_server import comparable, redis_entry, redis_server, rewrite_aof, shard_writer

DEFAULT_AOF = ("--appendonly", "yes", "--appendfsync", "always")  # aof-use-rdb-preamble yes
RESP_AOF = (*DEFAULT_AOF, "--aof-use-rdb-preamble", "no")
INCR = "appendonly.aof.1.incr.aof"


def resp(*argv: bytes) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def workload(client: redis.Redis, rng: random.Random, count: int, tag: str = "") -> None:
    """Writes of every basic type, with hash tags so MULTI/EXEC and RENAME stay in a slot."""
    for i in range(count):
        key = f"{{k{rng.randrange(40)}}}{tag}"
        choice = rng.randrange(9)
        if choice == 0:
            client.incr(f"{key}:n")
        elif choice == 1:
            client.rpush(f"{key}:l", i, i + 1)
        elif choice == 2:
            client.hset(f"{key}:h", f"f{rng.randrange(5)}", i)
        elif choice == 3:
            client.sadd(f"{key}:s", rng.randrange(30))
        elif choice == 4:
            client.zadd(f"{key}:z", {f"m{rng.randrange(9)}": rng.random()})
        elif choice == 5:
            client.xadd(f"{key}:x", {"i": i})
        elif choice == 6:
            with client.pipeline(transaction=True) as pipe:
                pipe.set(f"{key}:a", i).append(f"{key}:a", "x").lpush(f"{key}:l", i)
                pipe.execute()
        elif choice == 7:
            client.delete(f"{key}:s", f"{key}:a")
        else:
            client.set(f"{key}:t", i, px=10_000_000)


def redis_state(client: redis.Redis) -> dict[tuple[int, bytes], Any]:
    return {(0, key): comparable(redis_entry(client, key)) for key in client.scan_iter(count=500)}


def our_state(data_dir: Path) -> dict[tuple[int, bytes], Any]:
    state = {}
    for shard_dir in moonish.shard_dirs(data_dir):
        with shard_writer(Path(shard_dir)) as writer:
            state.update(
                {(db, key): comparable(entry) for db, key, entry in writer.keyspace.items()}
            )
    return state


def records(data_dir: Path) -> list[list[tuple[str, str, Any]]]:
    """Per shard, (op, key, after image) of every change, in LSN order."""
    shards = []
    for shard_dir in moonish.shard_dirs(data_dir):
        events = [orjson.loads(e.envelope) for e in shard_read.tail(shard_dir)]
        shards.append([(e["op"], (e["after"] or e["before"])["key"], e["after"]) for e in events])
    return shards


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "redis"
    path.mkdir()
    return path


def test_redis_default_aof_imports_and_reruns_add_only_what_is_new(
    tmp_path: Path, workdir: Path
) -> None:
    """Redis's own defaults: the AOF has an RDB base file. An import, then Redis writes more
    and a rerun adds only that; then BGREWRITEAOF removes the files the positions name, Redis
    writes and deletes more, and a rerun gives each shard only the differences."""
    rng = random.Random(11)
    data = tmp_path / "data"
    with redis_server(workdir, *DEFAULT_AOF) as client:
        workload(client, rng, 400)
        first = import_aof(workdir / "appendonlydir", data, 3)
        assert first.files[0].endswith(".base.rdb") and first.rdb_keys == 0
        assert our_state(data) == redis_state(client)
        again = import_aof(workdir / "appendonlydir", data, 3)
        assert again.records == 0
        workload(client, rng, 200)
        more = import_aof(workdir / "appendonlydir", data, 3)
        assert 0 < more.commands <= 200 + 3 * 200  # MULTI/EXEC blocks hold 3
        assert our_state(data) == redis_state(client)
        before = records(data)
        rewrite_aof(client)
        while (workdir / "appendonlydir" / INCR).exists():  # removed in the background
            time.sleep(0.02)
        client.set("{k1}:new", "v")
        client.delete("{k2}:l", "{k3}:l")
        gone = {b"{k2}:l", b"{k3}:l"}
        resync = import_aof(workdir / "appendonlydir", data, 3)
        assert resync.resynced
        assert our_state(data) == redis_state(client)
        after = records(data)
    added = [
        change for shard, old in zip(after, before, strict=True) for change in shard[len(old) :]
    ]
    assert ("c", "{k1}:new", added[[c[1] for c in added].index("{k1}:new")][2]) in added
    deleted = {key.encode() for op, key, _ in added if op == "d"}
    assert deleted == gone & {key for (_, key) in our_state_keys(before)}
    assert len(added) == 1 + len(deleted)  # nothing else changed: nothing else written


def our_state_keys(shards: list[list[tuple[str, str, Any]]]) -> set[tuple[int, bytes]]:
    live: set[tuple[int, bytes]] = set()
    for shard in shards:
        for op, key, _ in shard:
            (live.discard if op == "d" else live.add)((0, key.encode()))
    return live


def test_rdb_base_keys_are_snapshot_rows(tmp_path: Path, workdir: Path) -> None:
    with redis_server(workdir, *DEFAULT_AOF) as client:
        workload(client, random.Random(5), 300)
        rewrite_aof(client)
        client.set("after-rewrite", "1")
        report = import_aof(workdir / "appendonlydir", tmp_path / "data", 2)
        assert our_state(tmp_path / "data") == redis_state(client)
    assert report.rdb_keys == len(our_state(tmp_path / "data")) - 1
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        events = [orjson.loads(e.envelope) for e in shard_read.tail(shard_dir)]
        rows = [e for e in events if e["op"] == "r"]
        assert rows and all(e["before"] is None and e["after"] for e in rows)
        assert rows == events[: len(rows)]  # the base first, then the AOF's commands
        marks = [e["source"]["snapshot"] for e in rows]
        assert marks[0] == "first" and marks[-1] == "last" and set(marks[1:-1]) <= {"true"}
        assert all(e["source"]["snapshot"] == "false" for e in events[len(rows) :])


KILL_SCRIPT = """
import sys
from moonish.redis.aof.importer import import_aof
print("importing", flush=True)
import_aof(sys.argv[1], sys.argv[2], 3)
"""


def test_an_import_killed_anywhere_and_rerun_applies_every_command_once(tmp_path: Path) -> None:
    """SIGKILL the import at random moments, rerun it each time: the records equal those of
    one uninterrupted import (the same changes, in the same order, none twice)."""
    aof = _aof(tmp_path, list(synthetic_commands(random.Random(7), 60_000)))
    began = time.monotonic()
    import_aof(aof, tmp_path / "once", 3)
    took = time.monotonic() - began  # kills fall within an import's run, however fast it is
    expected = records(tmp_path / "once")
    data = tmp_path / "data"
    rng = random.Random(3)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    kills = 0
    for _ in range(4):
        with subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(aof), str(data)],
                              env=env, stdout=subprocess.PIPE) as process:  # fmt: skip
            assert process.stdout is not None
            process.stdout.readline()  # the import starts (Python and moonish are loaded)
            time.sleep(rng.uniform(0.1, 0.9) * took)
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                kills += 1
    assert kills >= 1
    import_aof(aof, data, 3)
    assert records(data) == expected
    assert import_aof(aof, data, 3).records == 0


def synthetic_commands(rng: random.Random, count: int) -> Iterator[bytes]:
    """Commands as Redis logs them, MULTI/EXEC blocks and DEL across shards included."""
    for i in range(count):
        key = b"k%d" % rng.randrange(300)
        choice = rng.randrange(6)
        if choice == 0:
            yield resp(b"INCR", key + b":n")
        elif choice == 1:
            yield resp(b"RPUSH", key + b":l", b"%d" % i)
        elif choice == 2:
            yield resp(b"HSET", key + b":h", b"f%d" % rng.randrange(5), b"%d" % i)
        elif choice == 3:
            yield resp(b"MULTI") + resp(b"SADD", key + b":s", b"%d" % i) + resp(
                b"INCRBY", key + b":n", b"2") + resp(b"EXEC")  # fmt: skip
        elif choice == 4:
            yield resp(b"DEL", key + b":s", b"k%d:l" % rng.randrange(300))
        else:
            yield resp(b"SELECT", b"%d" % rng.randrange(3))


def test_a_failed_import_fixed_and_rerun_continues_where_it_stopped(tmp_path: Path) -> None:
    aof = _aof(tmp_path, [resp(b"INCR", b"n%d" % (i % 7)) for i in range(30)]
               + [resp(b"LPUSH", b"n1", b"x")]  # WRONGTYPE: Redis never logged this
               + [resp(b"RPUSH", b"l%d" % (i % 5), b"%d" % i) for i in range(30)])  # fmt: skip
    with pytest.raises(CommandError, match="WRONGTYPE") as info:
        import_aof(aof, tmp_path / "data", 2)
    assert info.value.path == str(aof / INCR)
    data = (aof / INCR).read_bytes()
    bad = resp(b"LPUSH", b"n1", b"x")
    (aof / INCR).write_bytes(data.replace(bad, resp(b"LPUSH", b"zz", b"x")))
    report = import_aof(aof, tmp_path / "data", 2)
    assert report.commands <= 31 + 2  # the rest (and shards' no-op replays of the tail)
    _aof(tmp_path / "ref", [])
    reference = tmp_path / "ref" / "appendonlydir"
    shutil.copy(aof / INCR, reference / INCR)
    import_aof(reference, tmp_path / "ref-data", 2)
    assert records(tmp_path / "data") == records(tmp_path / "ref-data")
    counts = Counter(op for shard in records(tmp_path / "data") for op, _, _ in shard)
    assert counts == {"c": 7 + 5 + 1, "u": 23 + 25}  # every INCR and RPUSH exactly once


def _aof(tmp_path: Path, commands: list[bytes]) -> Path:
    aof = tmp_path / "appendonlydir"
    aof.mkdir(parents=True)
    (aof / "appendonly.aof.manifest").write_text(f"file {INCR} seq 1 type i\n")
    (aof / INCR).write_bytes(b"".join(commands))
    return aof


def test_a_data_directory_refuses_another_source(tmp_path: Path) -> None:
    first = _aof(tmp_path / "a", [resp(b"SET", b"k", b"v")])
    second = _aof(tmp_path / "b", [resp(b"SET", b"k", b"v")])
    import_aof(first, tmp_path / "data", 1)
    with pytest.raises(SourceMismatchError, match="follows the aof"):
        import_aof(second, tmp_path / "data", 1)
    (tmp_path / "data" / "source.json").unlink()
    with pytest.raises(SourceMismatchError, match="does not say which source"):
        import_aof(first, tmp_path / "data", 1)


def test_an_import_that_fails_before_writing_anything_leaves_nothing(tmp_path: Path) -> None:
    aof = _aof(tmp_path, [resp(b"MODULE.CMD", b"k")])
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(UnsupportedFormatError, match=r"MODULE\.CMD"):
        import_aof(aof, tmp_path / "data", 2)
    assert sorted(tmp_path.rglob("*")) == before


def test_a_cross_shard_command_cut_between_its_shards_is_refused(tmp_path: Path) -> None:
    """RENAME of a key of shard 0 to a key of shard 1, killed after shard 0's append: the
    rerun cannot complete it exactly once, and says so instead of guessing."""
    first = [resp(b"SET", b"a", b"1"), resp(b"SET", b"b0", b"2")]
    aof = _aof(tmp_path, first)
    import_aof(aof, tmp_path / "data", 2)
    (aof / INCR).write_bytes(b"".join([*first, resp(b"RENAME", b"a", b"b0")]))
    import_aof(aof, tmp_path / "whole", 2)
    assert [len(changes) for changes in records(tmp_path / "data")] == [1, 1]
    assert [len(changes) for changes in records(tmp_path / "whole")] == [2, 2]  # and RENAME's
    # What a kill between the two shards' appends of the RENAME leaves: shard 0 has them
    # (the import's appends are in shard order), shard 1 not. (Built from two imports: the
    # shard writer's append cannot be patched to raise, compiled by mypyc: docs/build.md.)
    shutil.rmtree(tmp_path / "data" / "shard-0")
    shutil.copytree(tmp_path / "whole" / "shard-0", tmp_path / "data" / "shard-0")
    with pytest.raises(ResumeError, match="RENAME changes keys of shards"):
        import_aof(aof, tmp_path / "data", 2)


def test_import_rdb_loads_reloads_and_diffs(tmp_path: Path, workdir: Path) -> None:
    rng = random.Random(9)
    dump = workdir / "dump.rdb"
    data = tmp_path / "data"
    with redis_server(workdir) as client:
        workload(client, rng, 500)
        client.set("expired", "x", px=1)
        client.save()
        time.sleep(0.01)
        first = import_rdb(dump, data, 3)
        theirs = redis_state(client)
        theirs.pop((0, b"expired"), None)
        assert our_state(data) == theirs and first.ops == {"r": len(theirs)}
        assert first.keys_loaded + first.keys_expired == len(theirs) + 1
        assert import_rdb(dump, data, 3).records == 0  # the same file again: nothing
        client.set("{k1}:t", "changed")
        client.delete("{k4}:l")
        client.set("brand-new", "1")
        client.save()
        second = import_rdb(dump, data, 3)
        assert our_state(data) == redis_state(client)
    assert second.ops == {"u": 1, "d": 1, "c": 1}
    other = tmp_path / "other.rdb"
    shutil.copy(dump, other)
    with pytest.raises(SourceMismatchError, match="follows the rdb"):
        import_rdb(other, data, 3)


def test_import_rdb_of_a_damaged_file_writes_nothing(tmp_path: Path, workdir: Path) -> None:
    with redis_server(workdir) as client:
        workload(client, random.Random(1), 100)
        client.save()
    data = (workdir / "dump.rdb").read_bytes()
    damaged = tmp_path / "damaged.rdb"
    for at in (9, 200, len(data) // 2, len(data) - 9):  # 9: the first opcode, made unknown
        flipped = 0xEE if at == 9 else data[at] ^ 0xFF
        damaged.write_bytes(data[:at] + bytes([flipped]) + data[at + 1 :])
        before = sorted(tmp_path.rglob("*"))
        with pytest.raises(RdbCorruptionError) as info:  # never "unsupported"
            import_rdb(damaged, tmp_path / "data", 2)
        assert info.value.path == str(damaged)
        if at == 9:  # an opcode that does not exist, in a file whose CRC-64 says: damage
            assert "CRC-64 does not match" in str(info.value) and info.value.offset == 9
        assert sorted(tmp_path.rglob("*")) == before


def test_import_rdb_from_the_cli(tmp_path: Path, workdir: Path) -> None:
    with redis_server(workdir) as client:
        client.set("small", "v")
        client.set("large", "x" * 500)
        client.save()
    out = run_cli("wal", "import-rdb", str(workdir / "dump.rdb"), str(tmp_path / "data"),
                  "--shards", "2", "--max-value-bytes", "100")  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = orjson.loads(out.stdout)
    assert summary["keys_loaded"] == 2 and summary["ops"] == {"r": 2}
    images = {
        e["after"]["key"]: (e["after"]["value"], e["after"].get("omitted_length"))
        for shard_dir in moonish.shard_dirs(tmp_path / "data")
        for e in map(lambda ev: orjson.loads(ev.envelope), shard_read.tail(shard_dir))
    }
    assert images == {"small": ("v", None), "large": (None, 500)}  # left out: over 100 bytes
    again = run_cli("wal", "import-rdb", str(workdir / "dump.rdb"), str(tmp_path / "data"),
                    "--shards", "2")  # fmt: skip
    assert again.returncode == 0 and orjson.loads(again.stdout)["records"] == 0
    aof = _aof(tmp_path / "aof", [resp(b"SET", b"k", b"v")])
    wrong = run_cli("wal", "import-aof", str(aof), str(tmp_path / "data"), "--shards", "2")
    assert wrong.returncode == 2 and "follows the rdb" in wrong.stderr


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import entry; entry()", *args],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip


def test_a_cross_shard_command_that_changed_nothing_in_a_shard_reruns(tmp_path: Path) -> None:
    """COPY from shard 1 to shard 0 writes no record in shard 1; its position still moves
    past the COPY (a position marker), so a rerun knows both shards hold it."""
    aof = _aof(tmp_path, [resp(b"SET", b"a", b"1"), resp(b"COPY", b"a", b"b0")])
    first = import_aof(aof, tmp_path / "data", 2)
    assert first.commands == 2
    again = import_aof(aof, tmp_path / "data", 2)
    assert again.commands == 0 and again.records == 0
    assert [len(shard) for shard in records(tmp_path / "data")] == [1, 1]  # markers unseen


LIBRARY = "#!lua name=mylib\nredis.register_function('hello', function() return 1 end)"


def test_rdb_functions_load_into_every_shard_once(tmp_path: Path, workdir: Path) -> None:
    """An RDB's function libraries (FUNCTION2) go to every shard (import-rdb and an AOF's RDB
    base file), and a rerun writes nothing."""
    with redis_server(workdir, *DEFAULT_AOF) as client:
        client.function_load(LIBRARY)
        client.set("k", "v")
        rewrite_aof(client)
        client.save()
    for data, load in [
        (tmp_path / "a", lambda d: import_rdb(workdir / "dump.rdb", d, 2)),
        (tmp_path / "b", lambda d: import_aof(workdir / "appendonlydir", d, 2)),
    ]:
        load(data)
        again = load(data)
        assert again.records == 0
        for shard_dir in moonish.shard_dirs(data):
            with shard_writer(Path(shard_dir)) as writer:
                assert dict(writer.libraries) == {b"mylib": LIBRARY.encode()}
        assert our_state(data) == {(0, b"k"): comparable(Entry("string", b"v"))}


def test_cdc_info_shows_each_shards_stored_position(tmp_path: Path) -> None:
    """Every shard of an import stores the position it applied (the position markers keep
    idle shards current); a shard written otherwise shows none."""
    from click.testing import CliRunner

    from cli.cdc_info import info

    commands = [resp(b"SET", b"k%d" % n, b"v") for n in range(20)]
    appendonlydir = _aof(tmp_path / "aof", commands)
    import_aof(appendonlydir, tmp_path / "data", 3)
    size = (appendonlydir / INCR).stat().st_size
    shown = CliRunner().invoke(info, [str(tmp_path / "data")])
    assert shown.exit_code == 0, shown.output
    for facts in orjson.loads(shown.output)["shards"]:
        stored = facts["source_position"]
        assert stored["lsn"] == facts["latest_lsn"]  # the last record carries it
        assert stored["position"] == {"aof": INCR, "offset": size}
        assert stored["text"] == f"{INCR}@{size}"
    one = CliRunner().invoke(info, [str(tmp_path / "data" / "shard-1")])
    assert orjson.loads(one.output)["source_position"]["position"]["offset"] == size
    with ShardWriter(tmp_path / "plain" / "shard-0") as writer:
        writer.execute(0, [b"SET", b"k", b"v"])
    plain = CliRunner().invoke(info, [str(tmp_path / "plain")])
    assert "source_position" not in orjson.loads(plain.output)["shards"][0]
