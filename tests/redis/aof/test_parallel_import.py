"""A first import on several processes (moonish.redis.aof.parallel): every shard's log holds the
same records as a one-process import's, commands across the workers' shards included."""

from __future__ import annotations

import random
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from moonish.clock import FixedClock
from moonish.errors import CommandError
from moonish.log.reader import ShardReader
from moonish.redis.aof import parallel
from moonish.redis.aof.importer import import_aof
from moonish.slots import shard_of_key
from tests.support.paths import ROOT
from tests.support.redis.aof import (
    INCR,
    RESP_AOF,
    our_state,
    redis_state,
    resp,
    workload,
    write_aof,
)
from tests.support.servers.redis_server import redis_server

START_US = 1_795_264_000_000_000
Frames = list[list[tuple[int, int, int, int, int, bytes]]]


def frames(data: Path, shards: int) -> Frames:
    """Per shard, every frame but its commit time (each process reads the clock itself)."""
    out = []
    for shard in range(shards):
        reader = ShardReader(data / f"shard-{shard}")
        reader.seek(0)
        found = []
        while batch := reader.poll(100_000):
            found += [
                (f.lsn, f.record_type, f.flags, f.batch_index, f.batch_size, f.payload)
                for f in batch
            ]
        reader.close()
        out.append(found)
    return out


def both(aof: Path, tmp_path: Path, shards: int, processes: int) -> tuple[Frames, Frames]:
    one = import_aof(aof, tmp_path / "one", shards, clock=FixedClock(START_US, 10))
    many = import_aof(
        aof, tmp_path / "many", shards, clock=FixedClock(START_US, 10), processes=processes
    )
    assert (
        many.commands,
        many.per_command,
        many.records,
        many.per_shard,
        many.lsn_ranges,
        many.transactions,
        many.position,
    ) == (
        one.commands,
        one.per_command,
        one.records,
        one.per_shard,
        one.lsn_ranges,
        one.transactions,
        one.position,
    )
    return frames(tmp_path / "one", shards), frames(tmp_path / "many", shards)


def across(rng: random.Random, count: int) -> Iterator[bytes]:
    """Commands on keys of every shard: many whose keys lie in shards of different workers
    (RENAME, SMOVE, LMOVE, COPY to another db, MSETNX, SUNIONSTORE), some in MULTI/EXEC."""
    for i in range(count):
        a, b = b"k%d" % rng.randrange(60), b"k%d" % rng.randrange(60)
        choice = rng.randrange(10)
        if choice == 0:
            yield resp(b"SET", a + b":s", b"%d" % i)
        elif choice == 1:
            yield resp(b"RPUSH", a + b":l", b"%d" % i, b"x")
        elif choice == 2:
            yield resp(b"SADD", a + b":t", b"%d" % rng.randrange(9))
        elif choice == 3 and a != b:
            yield (
                resp(b"MULTI")
                + resp(b"SET", b + b":s", b"v")
                + resp(b"RENAME", b + b":s", a + b":r")
                + resp(b"EXEC")
            )
        elif choice == 4:
            yield resp(b"SMOVE", a + b":t", b + b":t", b"%d" % rng.randrange(9))
        elif choice == 5:
            yield resp(b"LMOVE", a + b":l", b + b":l", b"LEFT", b"RIGHT")
        elif choice == 6:
            yield resp(b"COPY", a + b":s", b + b":c", b"DB", b"3", b"REPLACE")
        elif choice == 7:
            yield resp(b"MSETNX", a + b":m%d" % i, b"1", b + b":m%d" % i, b"2")
        elif choice == 8:
            yield resp(b"SUNIONSTORE", a + b":u", a + b":t", b + b":t")
        else:
            yield resp(b"DEL", a + b":s", b + b":l")


@pytest.mark.slow
def test_a_parallel_import_writes_what_one_process_writes(tmp_path: Path) -> None:
    commands = list(across(random.Random(4), 3000))
    aof = write_aof(tmp_path, commands)
    for processes, shards in ((2, 4), (3, 5)):
        one, many = both(aof, tmp_path / f"{processes}", shards, processes)
        assert one == many
    moved = [c for c in commands if re.match(rb"\*[45]\r\n\$5\r\n[SL]MOVE", c)]
    workers = [{shard_of_key(key, 4) // 2 for key in re.findall(rb"k\d+:[tl]", c)} for c in moved]
    assert sum(len(w) == 2 for w in workers) > 100  # across the two workers' shards


@pytest.mark.redis
def test_the_fixture_and_a_redis_workload_import_in_parallel_as_in_one_process(
    tmp_path: Path,
) -> None:
    fixture = ROOT / "fixtures" / "redis-aof" / "mixed" / "appendonlydir"
    one, many = both(fixture, tmp_path / "fixture", 4, 2)
    assert one == many
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with redis_server(workdir, *RESP_AOF) as client:
        workload(client, random.Random(2), 600)
        client.rename("{k1}:n", "{k2}:moved")  # across shards
        import_aof(workdir / "appendonlydir", tmp_path / "data", 3, processes=2)
        assert our_state(tmp_path / "data") == redis_state(client)
        assert import_aof(workdir / "appendonlydir", tmp_path / "data", 3).records == 0


def test_a_rerun_or_an_aof_with_sort_runs_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    aof = write_aof(
        tmp_path,
        [
            resp(b"SET", b"a", b"1"),
            resp(b"RPUSH", b"l", b"a"),
            resp(b"SORT", b"l", b"BY", b"nosort", b"STORE", b"d"),
        ],
    )
    workers = []
    monkeypatch.setattr(parallel, "run_workers", lambda *args: workers.append(args))
    first = import_aof(aof, tmp_path / "data", 4, processes=2)
    assert not workers and first.commands == 3
    (aof / INCR).write_bytes((aof / INCR).read_bytes() + resp(b"SET", b"b", b"2"))
    assert import_aof(aof, tmp_path / "data", 4, processes=2).commands == 1
    assert not workers


def test_a_failed_parallel_import_is_fixed_and_rerun(tmp_path: Path) -> None:
    """The workers of other shards go on past the refused command (parallel.py): a fix that
    keeps the command's keys is applied once, where it belongs."""
    commands = [resp(b"INCR", b"n%d" % (i % 7)) for i in range(40)]
    commands[25] = resp(b"LPUSH", b"n1", b"x")  # WRONGTYPE: Redis never logged this
    aof = write_aof(tmp_path, commands)
    with pytest.raises(CommandError, match="WRONGTYPE") as info:
        import_aof(aof, tmp_path / "data", 4, processes=2)
    assert info.value.path == str(aof / INCR)
    (aof / INCR).write_bytes(
        (aof / INCR).read_bytes().replace(resp(b"LPUSH", b"n1", b"x"), resp(b"INCRBY", b"n1", b"5"))
    )
    import_aof(aof, tmp_path / "data", 4, processes=2)  # a rerun: one process
    shutil.rmtree(tmp_path / "ref", ignore_errors=True)
    reference = write_aof(tmp_path / "ref", [(aof / INCR).read_bytes()])
    import_aof(reference, tmp_path / "ref-data", 4)
    assert our_state(tmp_path / "data") == our_state(tmp_path / "ref-data")
