"""Commands on whole keys: DEL, UNLINK, RENAME, COPY, the EXPIRE family, PERSIST, FLUSHDB, MOVE,
SWAPDB, one case each (the reply, the c/u/d of each key, the key's value afterwards;
tests.support.redis.command_cases), and FLUSHALL across databases."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import moonish
from moonish.clock import FixedClock
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.redis.command_cases import NOW_MS, Case, run_case
from tests.support.wal import START_US

CASES: dict[str, Case] = {
    "DEL": ([["SET", "a", "1"]], ["DEL", "a", "b"], 1, [("a", "d")], "a", None),
    "UNLINK": (
        [["SET", "a", "1"], ["SET", "b", "1"]],
        ["UNLINK", "a", "b"],
        2,
        [("a", "d"), ("b", "d")],
        "b",
        None,
    ),
    "RENAME onto a key": (
        [["SET", "a", "1", "EX", "5"], ["SET", "b", "2"]],
        ["RENAME", "a", "b"],
        b"OK",
        [("a", "d"), ("b", "u")],
        "b",
        ("string", b"1", NOW_MS + 5000),
    ),
    "RENAMENX taken": (
        [["SET", "a", "1"], ["SET", "b", "2"]],
        ["RENAMENX", "a", "b"],
        0,
        [],
        "a",
        ("string", b"1", None),
    ),
    "COPY": (
        [["RPUSH", "a", "x"]],
        ["COPY", "a", "b"],
        1,
        [("b", "c")],
        "b",
        ("list", [b"x"], None),
    ),
    "EXPIRE GT without TTL": (
        [["SET", "k", "v"]],
        ["EXPIRE", "k", "10", "GT"],
        0,
        [],
        "k",
        ("string", b"v", None),
    ),
    "PEXPIRE": (
        [["SET", "k", "v"]],
        ["PEXPIRE", "k", "250"],
        1,
        [("k", "u")],
        "k",
        ("string", b"v", NOW_MS + 250),
    ),
    "EXPIREAT past": ([["SET", "k", "v"]], ["EXPIREAT", "k", "1"], 1, [("k", "d")], "k", None),
    "PEXPIREAT LT": (
        [["SET", "k", "v", "PX", "900"]],
        ["PEXPIREAT", "k", str(NOW_MS + 100), "LT"],
        1,
        [("k", "u")],
        "k",
        ("string", b"v", NOW_MS + 100),
    ),
    "PERSIST": (
        [["SET", "k", "v", "EX", "5"]],
        ["PERSIST", "k"],
        1,
        [("k", "u")],
        "k",
        ("string", b"v", None),
    ),
    "FLUSHDB": (
        [["SET", "a", "1"], ["HSET", "b", "f", "v"]],
        ["FLUSHDB"],
        b"OK",
        [("a", "d"), ("b", "d")],
        "a",
        None,
    ),
    "MOVE": (
        [["SET", "k", "v", "EX", "5"]],
        ["MOVE", "k", "3"],
        1,
        [("k", "d"), ("k", "c")],
        "k",
        None,
    ),
    "SWAPDB": (
        [["SET", "a", "1"]],
        ["SWAPDB", "0", "1"],
        b"OK",
        [("a", "d"), ("a", "c")],
        "a",
        None,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_command(shard: Path, name: str) -> None:
    run_case(shard, name, CASES[name])


def test_flushall_reaches_every_db(shard: Path) -> None:
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    with ShardWriter(shard, options, FixedClock(START_US, 0)) as writer:
        writer.execute(0, ["SET", "a", "1"])
        writer.execute(3, ["SET", "a", "1"])
        result = writer.execute(5, ["FLUSHALL"])
        assert len(writer.keyspace) == 0
    events = moonish.read(shard, result.lsns[0], 10).events
    assert [(orjson.loads(e.envelope)["source"]["db"], e.op) for e in events] == [
        (0, "d"),
        (3, "d"),
    ]
