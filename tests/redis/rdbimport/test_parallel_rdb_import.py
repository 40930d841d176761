"""``wal import-rdb --processes`` (moonish.redis.rdbimport.parallel) against a real redis-server's
dump: the same logs as one process, a reload as differences, every worker's progress heard,
and a worker's failure raised."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

import moonish
from moonish.cdc import shard_read
from moonish.errors import WriterLockedError
from moonish.redis.rdbimport.importer import import_rdb
from tests.support.paths import ROOT
from tests.support.redis.aof import workload
from tests.support.redis.capture import our_state, redis_state
from tests.support.servers.redis_server import redis_server, shard_writer

pytestmark = pytest.mark.redis


def envelopes(data_dir: Path) -> list[list[dict[str, Any]]]:
    """Each shard's envelopes without their times (each process reads its own clock)."""
    out = []
    for shard_dir in moonish.shard_dirs(data_dir):
        shard = []
        for event in shard_read.tail(shard_dir):
            envelope = orjson.loads(event.envelope)
            for name in ("ts_ms", "ts_us", "ts_ns"):
                envelope.pop(name, None)
                envelope.get("source", {}).pop(name, None)
            shard.append(envelope)
        out.append(shard)
    return out


def test_several_processes_load_the_logs_of_one(tmp_path: Path) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    dump = workdir / "dump.rdb"
    with redis_server(workdir) as client:
        workload(client, random.Random(4), 1500)
        client.function_load("#!lua name=lib\nredis.register_function('f', function() end)")
        client.save()
        heard: list[int] = []
        one = import_rdb(dump, tmp_path / "one", 4)
        two = import_rdb(dump, tmp_path / "two", 4, processes=2, progress=heard.append)
        assert our_state(tmp_path / "two") == redis_state(client, (0,))
        assert envelopes(tmp_path / "two") == envelopes(tmp_path / "one")
        assert (two.records, two.per_shard, two.ops) == (one.records, one.per_shard, one.ops)
        assert sum(heard) == two.records and all(two.per_shard)
        assert import_rdb(dump, tmp_path / "two", 4, processes=2).records == 0  # loaded
        client.set("{k1}:t", "changed")
        client.delete("{k4}:l")
        client.save()
        again = import_rdb(dump, tmp_path / "two", 4, processes=3)
        assert again.ops == {"u": 1, "d": 1}
        assert our_state(tmp_path / "two") == redis_state(client, (0,))


def test_a_workers_failure_is_raised_and_a_rerun_loads_the_rest(tmp_path: Path) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    dump = workdir / "dump.rdb"
    with redis_server(workdir) as client:
        workload(client, random.Random(8), 300)
        client.save()
        import_rdb(dump, tmp_path / "data", 4)  # makes the directory, then a newer dump
        client.set("brand-new", "v")
        client.delete(*[key for key in client.scan_iter("{k1*")])
        client.save()
        with shard_writer(tmp_path / "data" / "shard-3"), pytest.raises(WriterLockedError):
            import_rdb(dump, tmp_path / "data", 4, processes=2)
        rerun = import_rdb(dump, tmp_path / "data", 4, processes=2)
        assert rerun.records > 0 and our_state(tmp_path / "data") == redis_state(client, (0,))


def test_import_rdb_processes_from_the_cli(tmp_path: Path) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with redis_server(workdir) as client:
        workload(client, random.Random(2), 200)
        client.save()
        expected = redis_state(client, (0,))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "wal",
            "import-rdb",
            str(workdir / "dump.rdb"),
            str(tmp_path / "data"),
            "--shards",
            "3",
            "--processes",
            "2",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    summary = orjson.loads(out.stdout)
    assert summary["ops"] == {"r": len(expected)} and summary["records"] == len(expected)
    assert our_state(tmp_path / "data") == expected
