"""``wal import-rdb`` (moonish.redis.rdbimport) of a real redis-server's dump: loads, reloads as
differences, refuses another source, writes nothing for a damaged file, runs from the CLI, and
loads function libraries into every shard once."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

import moonish
from moonish.cdc import shard_read
from moonish.redis.aof.importer import import_aof
from moonish.redis.rdb.reader import RdbCorruptionError
from moonish.redis.rdbimport.importer import import_rdb
from moonish.redis.routing.sources import SourceMismatchError
from moonish.values.model import Entry
from tests.support.paths import ROOT
from tests.support.redis.aof import DEFAULT_AOF, our_state, redis_state, resp, workload, write_aof
from tests.support.servers.redis_server import comparable, redis_server, rewrite_aof, shard_writer

pytestmark = pytest.mark.redis


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
    with pytest.raises(SourceMismatchError, match="follows the RDB file"):
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
    out = run_cli(
        "wal",
        "import-rdb",
        str(workdir / "dump.rdb"),
        str(tmp_path / "data"),
        "--shards",
        "2",
        "--max-value-bytes",
        "100",
    )
    assert out.returncode == 0, out.stderr
    summary = orjson.loads(out.stdout)
    assert summary["keys_loaded"] == 2 and summary["ops"] == {"r": 2}
    images = {
        e["after"]["key"]: (e["after"]["value"], e["after"].get("omitted_length"))
        for shard_dir in moonish.shard_dirs(tmp_path / "data")
        for e in map(lambda ev: orjson.loads(ev.envelope), shard_read.tail(shard_dir))
    }
    assert images == {"small": ("v", None), "large": (None, 500)}  # left out: over 100 bytes
    again = run_cli(
        "wal", "import-rdb", str(workdir / "dump.rdb"), str(tmp_path / "data"), "--shards", "2"
    )
    assert again.returncode == 0 and orjson.loads(again.stdout)["records"] == 0
    aof = write_aof(tmp_path / "aof", [resp(b"SET", b"k", b"v")])
    wrong = run_cli("wal", "import-aof", str(aof), str(tmp_path / "data"), "--shards", "2")
    assert wrong.returncode == 2 and "follows the RDB file" in wrong.stderr


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import entry; entry()", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


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
