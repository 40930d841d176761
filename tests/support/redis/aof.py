"""AOF directories for the import tests: the fixtures' paths, commands as Redis logs them (RESP),
AOF directories written by hand, a Redis workload, and the keyspace and changes an import left."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import hiredis
import orjson
import redis

import moonish
from moonish.cdc import shard_read
from tests.support.paths import ROOT
from tests.support.servers.redis_server import comparable, redis_entry, shard_writer

FIXTURES = ROOT / "fixtures" / "redis-aof"


SLICE = FIXTURES / "slice" / "appendonlydir"


MIXED = FIXTURES / "mixed" / "appendonlydir"


INCR = "appendonly.aof.1.incr.aof"


def aof_commands(directory: Path) -> list[list[bytes]]:
    reader = hiredis.Reader()
    reader.feed((directory / INCR).read_bytes())
    commands = []
    while (item := reader.gets()) is not False:
        commands.append(item)
    return commands


def all_envelopes(data_dir: Path, shards: int) -> list[list[dict]]:
    """Every shard's envelopes, messages included."""
    return [
        [orjson.loads(e.envelope) for e in shard_read.tail(data_dir / f"shard-{k}", messages=True)]
        for k in range(shards)
    ]


def resp(*argv: bytes) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def copy_aof(tmp_path: Path, data: bytes) -> Path:
    target = tmp_path / "appendonlydir"
    shutil.copytree(SLICE, target)
    (target / INCR).write_bytes(data)
    return target


DEFAULT_AOF = ("--appendonly", "yes", "--appendfsync", "always")  # aof-use-rdb-preamble yes


RESP_AOF = (*DEFAULT_AOF, "--aof-use-rdb-preamble", "no")


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


def write_aof(tmp_path: Path, commands: list[bytes]) -> Path:
    aof = tmp_path / "appendonlydir"
    aof.mkdir(parents=True)
    (aof / "appendonly.aof.manifest").write_text(f"file {INCR} seq 1 type i\n")
    (aof / INCR).write_bytes(b"".join(commands))
    return aof


def tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))
