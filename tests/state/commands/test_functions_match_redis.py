"""FUNCTION LOAD/DELETE/FLUSH/RESTORE against a real redis-server (7.0.15): the same replies
and error texts, the same libraries as ``FUNCTION LIST WITHCODE`` after every command, kept
across restarts (from the log and from a snapshot); an AOF Redis wrote for a workload of
functions, FCALL and DUMP/RESTORE of every type imported into 1 and 3 shards gives every shard
Redis's libraries and the shards together Redis's keyspace; the message records they become."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import crc32c
import orjson
import pytest
import redis

import moonish
from moonish.errors import CommandError, UnsupportedFormatError
from moonish.log.verify import dump_lines, verify_shard
from moonish.redis.aof.importer import import_aof
from moonish.state.libraries import libraries_from_lines
from moonish.state.snapshot import read_snapshot
from tests.state.commands.test_restore_matches_redis import dump_payload
from tests.support.servers.redis_server import (
    comparable,
    redis_entry,
    redis_server,
    rewrite_aof,
    shard_writer,
)

BODY = "\nredis.register_function('{0}', function(keys, args) return '{0}' end)"
LIB1 = "#!lua name=lib1" + BODY.format("f1")
LIB1_NEW = "#!lua name=lib1" + BODY.format("f1") + "\n-- changed"
LIB2 = "#!LUA   NAME=lib2  " + BODY.format("f2")  # engine and name= in any case, spaces
LIB3 = '#!lua "name=lib\\x33"' + BODY.format("f3")  # sdssplitargs' quotes and escapes: lib3
WRITER = """#!lua name=writer
redis.register_function('setall', function(keys, args)
  for _, key in ipairs(keys) do redis.call('SET', key, args[1]) end
  return #keys
end)
redis.register_function('bump', function(keys, args)
  redis.call('HINCRBY', keys[1], 'n', 1)
  return redis.call('RPUSH', keys[2], args[1])
end)"""


def redis_libraries(client: redis.Redis) -> dict[bytes, bytes]:
    """``FUNCTION LIST WITHCODE`` as library name -> code."""
    libraries = {}
    for item in client.execute_command("FUNCTION", "LIST", "WITHCODE"):
        fields = item if isinstance(item, dict) else dict(zip(item[::2], item[1::2], strict=True))
        fields = {k.encode() if isinstance(k, str) else k: v for k, v in fields.items()}
        libraries[fields[b"library_name"]] = fields[b"library_code"]
    return libraries


@pytest.fixture(scope="module")
def payloads(server: redis.Redis) -> dict[str, bytes]:
    """FUNCTION DUMP payloads of lib1 alone and of lib1 + lib2 (old code), and a key's DUMP."""
    server.function_flush()
    server.function_load(LIB1)
    one = server.function_dump()
    server.function_load(LIB2)
    both = server.function_dump()
    server.function_flush()
    server.set("k", "v")
    key = server.dump("k")
    server.flushall()
    return {"one": one, "both": both, "key": key}


def rdb_function(code: bytes) -> bytes:
    """A FUNCTION2 item: the opcode, then the code as an RDB string (6 or 14-bit length)."""
    assert len(code) < 1 << 14
    size = bytes([len(code)]) if len(code) < 64 else bytes([0x40 | len(code) >> 8, len(code) & 255])
    return b"\xf5" + size + code


def _same(ours: Any, theirs: Any) -> bool:
    return ours == theirs or (ours == b"OK" and theirs is True)


def run_functions(server: redis.Redis, tmp_path: Path, commands: list[list[Any]]) -> None:
    """Each command on both; same reply or error text, same libraries after each; the same
    libraries again after a restart from the log, and from a snapshot."""
    server.function_flush()
    with shard_writer(tmp_path / "shard") as writer:
        for command in commands:
            try:
                theirs: Any = server.execute_command(*command)
            except redis.ResponseError as exc:
                theirs = exc
            try:
                ours = writer.execute(0, command).reply
            except CommandError as exc:
                assert isinstance(theirs, redis.ResponseError), (command, exc.message)
                assert exc.message.removeprefix("ERR ") == str(theirs), (command, exc.message)
            else:
                assert not isinstance(theirs, Exception), (command, theirs)
                assert _same(ours, theirs), (command, ours, theirs)
            assert writer.libraries == redis_libraries(server), command
    with shard_writer(tmp_path / "shard") as writer:  # from the log
        assert writer.libraries == redis_libraries(server)
        writer.checkpoint()
        writer.execute(0, ["SET", "after", "snapshot"])
    with shard_writer(tmp_path / "shard") as writer:  # from the snapshot, then the log
        assert writer.libraries == redis_libraries(server)
        snapshot = read_snapshot(writer.checkpoint()[0])
        assert libraries_from_lines(snapshot.libraries) == writer.libraries


@pytest.mark.redis
def test_function_load_delete_flush_match_redis(server: redis.Redis, tmp_path: Path) -> None:
    run_functions(
        server,
        tmp_path,
        [
            ["FUNCTION", "LOAD", LIB1],
            ["FUNCTION", "LOAD", LIB1],  # already exists
            ["FUNCTION", "LOAD", "REPLACE", LIB1_NEW],
            ["function", "load", "replace", "REPLACE", LIB1],
            ["FUNCTION", "LOAD", "FOO", LIB1],
            ["FUNCTION", "LOAD", LIB2],
            ["FUNCTION", "LOAD", LIB3],
            ["FUNCTION", "LOAD", "return 1"],
            ["FUNCTION", "LOAD", "#!lua name=x"],
            ["FUNCTION", "LOAD", '#!lua name="x\n' + BODY.format("fx")],
            ["FUNCTION", "LOAD", "#!lua name='x'y" + BODY.format("fx")],
            ["FUNCTION", "LOAD", "#!lua" + BODY.format("fx")],
            ["FUNCTION", "LOAD", "#!lua name=a name=b" + BODY.format("fx")],
            ["FUNCTION", "LOAD", "#!lua foo=bar name=a" + BODY.format("fx")],
            ["FUNCTION", "LOAD", "#!lua name=a-b" + BODY.format("fx")],
            ["FUNCTION", "LOAD", "#!lua name=" + BODY.format("fx")],
            ["FUNCTION", "LOAD", "#!python name=p" + BODY.format("fx")],
            ["FUNCTION", "LOAD", b"#!lua name=n\x00ul" + BODY.format("fx").encode()],
            ["FUNCTION", "LOAD", "REPLACE"],
            ["FUNCTION", "LOAD"],
            ["FUNCTION"],
            ["FUNCTION", "NOPE"],
            ["FUNCTION", "DELETE", "nope"],
            ["FUNCTION", "DELETE", "lib2"],
            ["FUNCTION", "DELETE"],
            ["FUNCTION", "DELETE", "lib1", "lib3"],
            ["FUNCTION", "FLUSH", "BAD"],
            ["FUNCTION", "FLUSH", "SYNC", "extra"],
            ["FUNCTION", "FLUSH", "async"],
            ["FUNCTION", "LOAD", LIB1],
            ["FUNCTION", "FLUSH"],
            ["FUNCTION", "LOAD", LIB2],
            ["FUNCTION", "FLUSH", "SYNC"],
        ],
    )


@pytest.mark.redis
def test_function_restore_matches_redis(
    server: redis.Redis, tmp_path: Path, payloads: dict[str, bytes]
) -> None:
    one, both = payloads["one"], payloads["both"]
    lib_x = rdb_function(("#!lua name=x" + BODY.format("fx")).encode())
    run_functions(
        server,
        tmp_path,
        [
            ["FUNCTION", "RESTORE", both],
            ["FUNCTION", "RESTORE", one],  # APPEND: lib1 exists
            ["FUNCTION", "RESTORE", one, "append"],
            ["FUNCTION", "LOAD", "REPLACE", LIB1_NEW],
            ["FUNCTION", "RESTORE", one, "REPLACE"],
            ["FUNCTION", "LOAD", LIB3],
            ["FUNCTION", "RESTORE", one, "FLUSH"],  # lib3 goes
            ["FUNCTION", "RESTORE", one, "BAD"],
            ["FUNCTION", "RESTORE", one, "APPEND", "x"],
            ["FUNCTION", "RESTORE", one[:-1] + b"\x00"],
            ["FUNCTION", "RESTORE", b"short"],
            ["FUNCTION", "RESTORE", payloads["key"]],  # not a function
            ["FUNCTION", "RESTORE", dump_payload(lib_x + b"x" * 20)],  # then no function
            ["FUNCTION", "RESTORE", dump_payload(lib_x * 2)],  # a library twice
            ["FUNCTION", "RESTORE", dump_payload(rdb_function(b"return 1"))],
            ["FUNCTION", "RESTORE", dump_payload(b"\xf5\x41\x00" + lib_x)],  # cut short
            ["FUNCTION", "RESTORE", dump_payload(b"")],
            ["FUNCTION", "RESTORE"],
            ["FUNCTION", "FLUSH"],
            ["FUNCTION", "RESTORE", dump_payload(b"")],
        ],
    )


def test_function_messages_and_a_version_1_snapshot(tmp_path: Path) -> None:
    """Each FUNCTION command is one moonish.function message (op m) with its change as JSON;
    a non-UTF-8 code is base64 in it; a snapshot written before libraries (version 1) still
    loads."""
    code = b"#!lua name=bin\nreturn '\xff'"
    with shard_writer(tmp_path / "shard") as writer:
        writer.execute(0, ["SET", "k", "v"])
        path, _ = writer.checkpoint()
        writer.execute(2, ["FUNCTION", "LOAD", code])
        assert writer.load_function(LIB1.encode()).reply == b"lib1"
        with pytest.raises(CommandError, match="Library 'lib1' already exists"):
            writer.load_function(LIB1_NEW.encode())
        writer.transaction([(0, ["SET", "k", "w"]), (5, ["FUNCTION", "DELETE", "lib1"])])
        writer.load_function(LIB1_NEW.encode(), replace=True)
        writer.execute(0, ["FUNCTION", "FLUSH", "ASYNC"])
        with pytest.raises(UnsupportedFormatError, match="FUNCTION LIST is not a write"):
            writer.execute(0, ["FUNCTION", "LIST"])
    assert verify_shard(tmp_path / "shard").records == 8
    (line,) = dump_lines(tmp_path / "shard", 3, 1)
    assert "type: message" in line
    assert 'prefix: \'moonish.function\', db: 2, content: {"command":"load"' in line
    read = moonish.read(tmp_path / "shard", 0, 100, messages=True)
    events = [e for e in read.events if e.op == "m"][1:]
    contents = [
        orjson.loads(base64.b64decode(orjson.loads(e.envelope)["message"]["content"]))
        for e in events
    ]
    assert [c["command"] for c in contents] == ["load", "load", "delete", "load", "flush"]
    assert contents[0] == {
        "command": "load",
        "library": "bin",
        "replace": False,
        "code": {"_b64": base64.b64encode(code).decode()},
    }
    assert contents[3]["replace"] is True and contents[4]["mode"] == "async"
    shapes = [orjson.loads(e.envelope) for e in events]
    assert [s["source"]["db"] for s in shapes] == [2, 0, 5, 0, 0]
    assert all(s["message"]["prefix"] == "moonish.function" and "after" not in s for s in shapes)
    assert shapes[2]["transaction"] == {
        "id": f"0:{events[2].lsn - 1}",
        "total_order": 2,
        "data_collection_order": 2,
    }
    lines = Path(path).read_bytes().split(b"\n")  # rewritten as version 1
    header = orjson.loads(lines[0])
    header["version"] = 1
    del header["libraries"]
    body = b"\n".join([orjson.dumps(header), *lines[1:-2]]) + b"\n"
    Path(path).write_bytes(body + b'{"crc32c":%d}\n' % crc32c.crc32c(body))
    assert read_snapshot(path).libraries == []
    with shard_writer(tmp_path / "shard") as writer:
        assert writer.libraries == {} and writer.keyspace.get(0, b"k") is not None


def _workload(client: redis.Redis) -> None:
    """Functions, FCALL of a function that writes keys (its effects arrive in MULTI/EXEC),
    DUMP + RESTORE of every type with every option, a BGREWRITEAOF in the middle (functions
    come back as FUNCTION LOAD, restored keys as plain commands)."""
    client.function_load(LIB1)
    client.function_load(LIB2)
    client.function_load(WRITER)
    client.fcall("setall", 3, "a", "{a}b", "c", "from-fcall")
    client.fcall("bump", 2, "counter", "log", "x")
    client.function_delete("lib2")
    client.rpush("list", *[b"e%d" % i for i in range(300)])
    client.sadd("ints", 1, 2, 3)
    client.sadd("set", *[b"m%d" % i for i in range(200)])
    client.zadd("zset", {b"z%d" % i: i / 3 for i in range(200)})
    client.zadd("small-zset", {"a": 1, "b": 2})
    client.hset("hash", mapping={b"f%d" % i: b"v" for i in range(200)})
    client.hset("small-hash", "f", "v")
    client.xadd("stream", {"f": "v"}, id="1-1")
    client.set("string", "s" * 500)
    client.set("number", 42)
    rewrite_aof(client)
    dumped = {
        key: client.dump(key)
        for key in [
            "list",
            "ints",
            "set",
            "zset",
            "small-zset",
            "hash",
            "small-hash",
            "stream",
            "string",
            "number",
            "counter",
        ]
    }
    functions = client.function_dump()
    for number, (key, payload) in enumerate(dumped.items()):
        client.restore(f"r-{key}", 0, payload)
        client.restore(key, 0, payload, replace=True, idletime=number)
        client.restore(f"t-{key}", 3_600_000, payload, frequency=number)  # relative TTL
        client.restore(f"a-{key}", 4102444800000, payload, absttl=True)
    client.restore("gone", 1000, dumped["number"], absttl=True)  # already past: no key
    client.restore("string", 1000, dumped["number"], absttl=True, replace=True)  # -> DEL
    client.function_flush()
    client.function_restore(functions)
    client.function_load(LIB2)
    client.function_restore(functions, "REPLACE")
    client.fcall("setall", 2, "x", "y", "after-restore")
    client.function_delete("lib1")
    client.execute_command("SELECT", 3)
    client.fcall("bump", 2, "counter", "log", "y")
    client.execute_command("FUNCTION", "RESTORE", functions, "FLUSH")
    client.function_load(LIB3)


@pytest.mark.redis
def test_redis_aof_with_functions_and_restore_imports_into_1_and_3_shards(tmp_path: Path) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    aof = ("--appendonly", "yes", "--aof-use-rdb-preamble", "no", "--appendfsync", "always")
    with redis_server(workdir, *aof) as client:
        _workload(client)
    with redis_server(workdir, *aof) as client:  # loads the AOF
        libraries = redis_libraries(client)
        keyspace = {}
        for db in range(16):
            client.execute_command("SELECT", db)
            for key in client.scan_iter(count=1000):
                keyspace[(db, key)] = comparable(redis_entry(client, key))
    assert set(libraries) == {b"lib1", b"lib3", b"writer"} and len(keyspace) > 40
    for shards in (1, 3):
        report = import_aof(workdir / "appendonlydir", tmp_path / f"data{shards}", shards)
        assert report.per_command["FUNCTION"] == 9 and report.per_command["RESTORE"] > 40
        assert not report.skipped
        ours = {}
        for shard_dir in moonish.shard_dirs(tmp_path / f"data{shards}"):
            with shard_writer(Path(shard_dir)) as writer:
                assert writer.libraries == libraries, shard_dir
                ours.update({(db, k): comparable(e) for db, k, e in writer.keyspace.items()})
                writer.checkpoint()
            with shard_writer(Path(shard_dir)) as writer:  # recovery from the snapshot
                assert writer.libraries == libraries
        assert ours == keyspace
