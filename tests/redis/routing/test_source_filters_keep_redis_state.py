"""Source filters (moonish.redis.routing.keyfilter) against a real redis-server: patterns match
the keys ``SCAN MATCH`` matches; an AOF, an RDB file and a live capture imported under a filter
hold exactly Redis's keyspace minus the keys left out, with no record of those; flows from a
key left out into a kept one are refused by name; the filter is stored and a data directory
refuses another; what was left out is counted."""

from __future__ import annotations

import base64
import random
from pathlib import Path
from typing import Any

import hiredis
import orjson
import pytest
import redis

from moonish.redis.aof.importer import import_aof
from moonish.redis.capture.status import CaptureOptions
from moonish.redis.rdbimport.importer import import_rdb
from moonish.redis.routing.filterfile import FilterMismatchError, load_filter
from moonish.redis.routing.keyfilter import FilterConflictError, KeyFilter, filter_spec
from tests.support.cli import run
from tests.support.redis.aof import RESP_AOF
from tests.support.redis.capture import FAST, Running, client_of, events, our_state, redis_state
from tests.support.servers.redis_server import redis_server

pytestmark = pytest.mark.redis

PATTERNS = [
    "tmp:*",
    "*:1?",
    "user:[0-4]*",
    "user:[^0-4]*",
    "h\\*x",
    "[a-c]z*",
    "*[]]*",
    "x[\\-]y",
    "??",
    "*",
    "session:*:cache",
]
EXCLUDE = ("tmp:*", "cache:*")


def keep(key: bytes) -> bool:
    return not (key.startswith(b"tmp:") or key.startswith(b"cache:"))


def test_patterns_match_the_keys_redis_scan_match_matches(tmp_path: Path) -> None:
    """Each pattern against a key set with Redis's special bytes: the keys KeyFilter leaves out
    are exactly those ``SCAN ... MATCH`` returns."""
    rng = random.Random(7)
    alphabet = b"abcz01459:*?[]^-\\x\xff"
    keys = {bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 7))) for _ in range(600)}
    keys |= {b"tmp:1", b"user:3a", b"user:9", b"h*x", b"hax", b"az", b"x-y", b"ab", b"]"}
    keys |= {b"session:a:cache", b"session::cache", b"a:12"}
    with redis_server(tmp_path) as client:
        client.mset({key: b"v" for key in keys})
        for pattern in PATTERNS:
            theirs = set(client.scan_iter(match=pattern.encode(), count=1000))
            kf = KeyFilter(filter_spec(exclude_keys=[pattern]))
            ours = {key for key in keys if kf.key_rule(key) is not None}
            assert ours == theirs, pattern
            only = KeyFilter(filter_spec(include_keys=[pattern]))
            assert {key for key in keys if only.key_rule(key) is None} == theirs, pattern


def flows(client: redis.Redis) -> None:
    """Writes whose keys are partly left out, in every way a filter can apply exactly."""
    client.mset({"a": 1, "tmp:a": 2, "b": 3, "cache:b": 4})
    client.delete("a", "tmp:a")
    client.rpush("list", *range(6))
    client.rpush("tmp:list", *range(3))
    client.lmove("list", "tmp:list", "LEFT", "RIGHT")  # kept source: its pop
    client.rpoplpush("list", "cache:l")
    client.sadd("set", "x", "y", "z")
    client.sadd("tmp:set", "p", "q")
    client.smove("set", "tmp:set", "x")  # kept source: SREM
    client.smove("tmp:set", "set", "p")  # kept destination gains the member named
    client.sunionstore("tmp:u", ["set", "tmp:set"])  # destination left out: nothing
    client.zadd("z", {"m": 1.5, "n": 2})
    client.zunionstore("cache:z", ["z"])
    client.copy("b", "tmp:copy")
    client.set("moved", "v")
    client.rename("moved", "tmp:moved")  # kept source: gone
    client.hset("h", mapping={"f": 1})
    with client.pipeline(transaction=True) as pipe:
        pipe.incr("counter").set("tmp:t", 1).hset("h", "g", 2).delete("tmp:t")
        pipe.execute()
    client.set("tmp:expiring", "v", px=100_000)
    client.xadd("tmp:stream", {"f": "v"})
    client.unlink("cache:b", "b")


TMP_COMMANDS = 14
"""Commands of :func:`flows` naming a ``tmp:`` key (each counted once)."""
CACHE_COMMANDS = 4


def test_an_aof_imported_under_a_filter_holds_redis_keyspace_without_the_keys_left_out(
    tmp_path: Path,
) -> None:
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    with redis_server(redis_dir, *RESP_AOF) as client:
        flows(client)
        for i in range(300):
            client.set(f"{'tmp' if i % 3 else 'k'}:{i}", i)
        expected = {k: v for k, v in redis_state(client, (0,)).items() if keep(k[1])}
    data = tmp_path / "data"
    args = ["wal", "import-aof", str(redis_dir / "appendonlydir"), str(data), "--shards", "3"]
    out = run(*args, "--exclude-keys", EXCLUDE[0], "--exclude-keys", EXCLUDE[1])
    assert out.returncode == 0, out.stderr
    summary = orjson.loads(out.stdout)
    assert summary["filtered"] == {
        "exclude_keys:tmp:*": TMP_COMMANDS + 200,
        "exclude_keys:cache:*": CACHE_COMMANDS,
    }
    assert our_state(data) == expected
    seen = {
        event["after"]["key"] if event["after"] else event["before"]["key"]
        for event in events(data)
    }
    assert seen and all(keep(key.encode()) for key in seen)
    stored = load_filter(str(data))
    assert stored is not None and stored[0].exclude_keys == (b"cache:*", b"tmp:*")
    assert stored[1] == {key: n for key, n in summary["filtered"].items()}
    info = orjson.loads(run("cdc", "info", str(data)).stdout)
    assert info["filter"]["commands_filtered"] == summary["filtered"]

    again = run(*args, "--exclude-keys", "tmp:*")  # another filter: refused, exit 2
    assert again.returncode == 2 and b"written with the filter" in again.stderr
    rerun = run(*args, "--exclude-keys", EXCLUDE[1], "--exclude-keys", EXCLUDE[0])
    assert rerun.returncode == 0, rerun.stderr  # the same filter (order aside): nothing new
    assert orjson.loads(rerun.stdout)["records"] == 0


def test_a_kept_key_computed_from_a_key_left_out_is_refused_by_name(tmp_path: Path) -> None:
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    with redis_server(redis_dir, *RESP_AOF) as client:
        client.set("keep", "1")
        client.set("tmp:src", "secret")
        client.rename("tmp:src", "kept-destination")
    data = tmp_path / "data"
    out = run(
        "wal",
        "import-aof",
        str(redis_dir / "appendonlydir"),
        str(data),
        "--shards",
        "2",
        "--exclude-keys",
        "tmp:*",
    )
    assert out.returncode == 5, out.stderr
    assert b"RENAME tmp:src kept-destination" in out.stderr and b"offset" in out.stderr
    with pytest.raises(FilterConflictError) as caught:
        import_aof(
            redis_dir / "appendonlydir",
            tmp_path / "lib",
            1,
            key_filter=filter_spec(exclude_keys=["tmp:*"]),
        )
    assert caught.value.path and caught.value.offset


def test_dbs_and_types_keep_exactly_those_keys(tmp_path: Path) -> None:
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    with redis_server(redis_dir, *RESP_AOF) as client:
        other = client_of(client, 1)
        for target in (client, other):
            target.set("s", "v")
            target.hset("h", mapping={"a": 1})
            target.rpush("l", 1, 2)
            target.sadd("set", 1)
            target.zadd("z", {"m": 1})
        client.set("h2", "string first")
        client.hset("was-list", "f", 1)
        client.rpush("l2", "a", "b")
        client.rename("l2", "was-list")  # a list over a kept hash: the hash is gone
        client.set("l", "a string over a list")  # a kept string over a list left out
        client.sort("set", store="sorted")  # a list: left out
        client.swapdb(0, 0)
        expected = {
            k: v
            for k, v in redis_state(client, (0, 1)).items()
            if k[0] == 0 and v[0] in ("string", "hash")
        }
        other.close()
    report = import_aof(
        redis_dir / "appendonlydir",
        tmp_path / "data",
        2,
        key_filter=filter_spec(dbs=[0], types=["string", "hash"]),
    )
    assert our_state(tmp_path / "data") == expected
    assert report.filtered["dbs"] >= 5 and report.filtered["types:list"] >= 1


def test_an_rdb_loaded_under_a_filter_leaves_the_keys_out_and_counts_them(tmp_path: Path) -> None:
    with redis_server(tmp_path) as client:
        for i in range(50):
            client.set(f"tmp:{i}", i)
            client.hset(f"user:{i}", mapping={"n": i})
        client.execute_command("SAVE")
        expected = {k: v for k, v in redis_state(client, (0,)).items() if keep(k[1])}
    spec = filter_spec(exclude_keys=["tmp:*"])
    report = import_rdb(tmp_path / "dump.rdb", tmp_path / "data", 4, key_filter=spec)
    assert report.filtered == {"keys:exclude_keys:tmp:*": 50}
    assert our_state(tmp_path / "data") == expected
    stored = load_filter(str(tmp_path / "data"))
    assert stored is not None and stored[2] == {"exclude_keys:tmp:*": 50}
    with pytest.raises(FilterMismatchError):
        import_rdb(tmp_path / "dump.rdb", tmp_path / "data", 4)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_live_capture_under_a_filter_follows_redis_without_the_keys_left_out(
    tmp_path: Path, processes: int
) -> None:
    """Keys before the capture (its full resync) and written live, some left out: the shards
    hold Redis's keyspace without them, and each command left out is counted once."""
    options = CaptureOptions(**{**_fields(FAST), "key_filter": filter_spec(exclude_keys=EXCLUDE)})
    with redis_server(tmp_path) as client:
        client.set("tmp:before", 1)
        client.set("before", 1)
        with Running(client, tmp_path / "data", 4, processes, options) as capture:
            capture.caught_up(client)
            flows(client)
            for i in range(40):
                client.set(f"tmp:{i}", i)
                client.set(f"k:{i}", i)
            capture.caught_up(client)
            report = capture.finish()
        expected = {k: v for k, v in redis_state(client, (0,)).items() if keep(k[1])}
    assert our_state(tmp_path / "data") == expected
    assert report.filtered == {
        "keys:exclude_keys:tmp:*": 1,
        "exclude_keys:tmp:*": TMP_COMMANDS + 40,
        "exclude_keys:cache:*": CACHE_COMMANDS,
    }
    stored = load_filter(str(tmp_path / "data"))
    assert (
        stored is not None
        and stored[1]["exclude_keys:tmp:*"] == report.filtered["exclude_keys:tmp:*"]
    )


def _fields(options: CaptureOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in options.__slots__}  # type: ignore[attr-defined]


def test_excluded_commands_leave_the_stream_but_not_the_keyspace(tmp_path: Path) -> None:
    """``--exclude-commands FLUSHALL --exclude-commands DEL``: their changes are not in the
    stream (no ``d`` of them), yet every later value is Redis's (an INCR after the FLUSHALL
    starts again from 1), after a restart's rebuild too; a ``moonish.filtered`` message in
    the log stands for each, and they are counted."""
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    with redis_server(redis_dir, *RESP_AOF) as client:
        for i in range(20):
            client.set(f"k:{i}", i)
        client.incr("counter", 5)
        client.delete("k:0", "k:1", "k:2")
        client.flushall()
        client.incr("counter")  # Redis: 1, not 6
        client.mset({"k:3": "again", "k:4": "again"})
        client.delete("k:3")
        expected = redis_state(client, (0,))
    data = tmp_path / "data"
    args = ["wal", "import-aof", str(redis_dir / "appendonlydir"), str(data), "--shards", "3"]
    out = run(*args, "--exclude-commands", "FLUSHALL", "--exclude-commands", "del")
    assert out.returncode == 0, out.stderr
    assert orjson.loads(out.stdout)["filtered"] == {
        "exclude_commands:DEL": 2,
        "exclude_commands:FLUSHALL": 1,
    }
    assert our_state(data) == expected  # opens the shards: their keyspaces are rebuilt
    changes = events(data)
    assert not [event for event in changes if event["op"] == "d"]
    counter = [event["after"]["value"] for event in changes if event["after"]["key"] == "counter"]
    assert counter == ["5", "1"]
    messages = run("cdc", "tail", str(data), "--messages")
    filtered = [
        orjson.loads(line)["message"]
        for line in messages.stdout.splitlines()
        if orjson.loads(line)["op"] == "m"
    ]
    assert {message["prefix"] for message in filtered} == {"moonish.filtered"}
    commands = [aof_commands_of(base64.b64decode(m["content"])) for m in filtered]
    assert sum(argv == [b"FLUSHALL"] for argv in commands) == 3  # every shard ran it
    deleted = [key for argv in commands if argv[0] == b"DEL" for key in argv[1:]]
    assert sorted(deleted) == [b"k:0", b"k:1", b"k:2", b"k:3"]  # each in its shard's part


def aof_commands_of(resp: bytes) -> list[bytes]:
    reader = hiredis.Reader()
    reader.feed(resp)
    command = reader.gets()
    assert isinstance(command, list)
    return command
