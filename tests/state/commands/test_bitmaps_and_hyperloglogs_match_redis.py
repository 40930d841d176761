"""SETRANGE, SETBIT, BITOP, BITFIELD; PFADD, PFCOUNT, PFMERGE and HyperLogLog bytes against a real
redis-server: each case runs the same commands on a redis-server started here and on a
ShardWriter (tests.support.redis.redis_compare ``run``): the same replies, the same keyspace after
every command and after the log is replayed."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.redis.redis_compare import FAR, RANDOM, run

pytestmark = pytest.mark.redis

# -- strings and bitmaps -------------------------------------------------------------------
STRING_CASES: dict[str, list[list[str | bytes]]] = {
    "SETRANGE pads and overwrites": [
        ["SETRANGE", "s", "5", "ab"],
        ["SETRANGE", "s", "1", "xyzxyzxyz"],
        ["SETRANGE", "s", "0", ""],
        ["SETRANGE", "missing", "3", ""],
        ["SETRANGE", "s", "-1", "a"],
        ["SETRANGE", "s", "x", "a"],
        ["SETRANGE", "s", "536870911", "ab"],
        ["SET", "n", "12"],
        ["SETRANGE", "n", "1", "9"],
        ["SETRANGE", "s", "0", b"\xff\x00"],
    ],
    "SETRANGE wrong type": [
        ["LPUSH", "l", "a"],
        ["SETRANGE", "l", "0", "x"],
        ["SETRANGE", "l", "0", ""],
        ["SETRANGE", "l", "-1", ""],
    ],
    "SETBIT": [
        ["SETBIT", "b", "7", "1"],
        ["SETBIT", "b", "7", "1"],
        ["SETBIT", "b", "0", "1"],
        ["SETBIT", "b", "0", "0"],
        ["SETBIT", "b", "100", "0"],
        ["SETBIT", "b", "3", "2"],
        ["SETBIT", "b", "-1", "1"],
        ["SETBIT", "b", "4294967296", "1"],
        ["SETBIT", "b", "x", "1"],
        ["SETBIT", "b", "3", "-1"],
        ["SET", "n", "5"],
        ["SETBIT", "n", "6", "1"],
        ["HSET", "h", "f", "v"],
        ["SETBIT", "h", "0", "1"],
        ["SETBIT", "h", "x", "1"],
        ["SETBIT", "b", "#3", "1"],
    ],
    "BITOP": [
        ["SET", "a", b"\xf0\x0f\xaa"],
        ["SET", "b", b"\xff"],
        ["SET", "c", ""],
        ["BITOP", "AND", "d", "a", "b"],
        ["BITOP", "or", "d", "a", "b", "missing"],
        ["BITOP", "XOR", "d", "a", "b", "a"],
        ["BITOP", "NOT", "d", "a"],
        ["BITOP", "NOT", "d", "a", "b"],
        ["BITOP", "NAND", "d", "a"],
        ["BITOP", "AND", "d", "missing", "c"],  # empty result: d is deleted
        ["LPUSH", "l", "x"],
        ["BITOP", "OR", "l", "a"],  # a list destination is overwritten
        ["BITOP", "OR", "d", "a", "l"],
        ["BITOP", "AND", "c", "c"],
        ["SET", "e", "v", "PXAT", FAR],
        ["BITOP", "OR", "e", "a"],  # the TTL goes too
        ["SET", "long", "x" * 70],
        ["BITOP", "AND", "d", "long", "a", "b"],
        ["BITOP", "NOT", "d", "long"],
    ],
    "BITFIELD": [
        ["BITFIELD", "f", "SET", "u8", "0", "200", "GET", "u8", "0", "GET", "i8", "0"],
        ["BITFIELD", "f", "INCRBY", "u8", "0", "100"],  # wraps
        [
            "BITFIELD",
            "f",
            "OVERFLOW",
            "SAT",
            "INCRBY",
            "u8",
            "0",
            "300",
            "INCRBY",
            "i8",
            "0",
            "-300",
        ],
        [
            "BITFIELD",
            "f",
            "OVERFLOW",
            "FAIL",
            "INCRBY",
            "u8",
            "0",
            "300",
            "INCRBY",
            "u4",
            "#3",
            "3",
        ],
        ["BITFIELD", "f", "SET", "i64", "#1", "-9223372036854775808", "INCRBY", "i64", "#1", "-1"],
        [
            "BITFIELD",
            "f",
            "OVERFLOW",
            "SAT",
            "INCRBY",
            "i64",
            "#1",
            "-1",
            "INCRBY",
            "i64",
            "#1",
            "9223372036854775807",
            "INCRBY",
            "i64",
            "#1",
            "9223372036854775807",
        ],
        ["BITFIELD", "f", "SET", "u63", "3", "9223372036854775807", "GET", "u63", "3"],
        [
            "BITFIELD",
            "f",
            "OVERFLOW",
            "SAT",
            "SET",
            "u8",
            "100",
            "-1",
            "SET",
            "i5",
            "200",
            "-100",
            "OVERFLOW",
            "WRAP",
            "SET",
            "i5",
            "300",
            "100",
            "SET",
            "u3",
            "7",
            "-1",
        ],
        ["BITFIELD", "f", "GET", "i3", "5", "GET", "u17", "1000"],
        ["BITFIELD", "g", "OVERFLOW", "FAIL", "INCRBY", "u2", "10", "9"],  # creates "\0\0"
        ["BITFIELD", "h", "GET", "u8", "0"],  # a read: nothing is created
        ["BITFIELD", "f", "GET", "u64", "0"],
        ["BITFIELD", "f", "GET", "i65", "0"],
        ["BITFIELD", "f", "GET", "x8", "0"],
        ["BITFIELD", "f", "GET", "u0", "0"],
        ["BITFIELD", "f", "GET", "u8", "-1"],
        ["BITFIELD", "f", "GET", "u8", "#-1"],
        ["BITFIELD", "f", "OVERFLOW", "UP", "GET", "u8", "0"],
        ["BITFIELD", "f", "INCRBY", "u8", "0"],
        ["BITFIELD", "f", "FOO"],
        ["BITFIELD", "f", "SET", "u8", "0", "1.5"],
        ["BITFIELD", "f"],
        ["LPUSH", "l", "x"],
        ["BITFIELD", "l", "GET", "u8", "0"],
        ["BITFIELD", "l", "SET", "u8", "0", "1"],
        ["BITFIELD", "l", "SET", "u8", "x", "1"],
        [
            "BITFIELD",
            "f",
            "OVERFLOW",
            "WRAP",
            "INCRBY",
            "i8",
            "4",
            "-129",
            "INCRBY",
            "u1",
            "#0",
            "3",
            "SET",
            "i1",
            "9",
            "1",
            "GET",
            "i1",
            "9",
        ],
        ["SET", "n", "123"],
        ["BITFIELD", "n", "INCRBY", "u8", "#0", "1"],
    ],
}


# -- HyperLogLog ---------------------------------------------------------------------------
CORRUPT_HLL = b"HYLL\x01" + bytes(11) + b"\x7f\xfe"  # covers 16383 registers, not 16384


HLL_CASES: dict[str, list[list[str | bytes]]] = {
    "sparse, dense, cached": [
        ["PFADD", "h", "a", "b", "c"],
        ["PFCOUNT", "h"],
        ["PFADD", "h", "a"],
        ["PFADD", "h"],
        ["PFADD", "new"],
        ["PFADD", "h", *[f"e{i}" for i in range(300)]],
        ["PFCOUNT", "h"],
        ["PFCOUNT", "h"],
        ["PFADD", "g", *[f"x{i}" for i in range(1500)]],
        ["PFCOUNT", "g"],
        ["PFADD", "g", *[f"y{i}" for i in range(1500)]],
        ["PFCOUNT", "g"],  # now dense
        ["PFMERGE", "m", "h", "new"],
        ["PFCOUNT", "m"],
        ["PFMERGE", "m2", "h", "g"],
        ["PFCOUNT", "m2"],
        ["PFCOUNT", "h", "g", "missing"],
        ["PFMERGE", "h", "m"],
        ["PFMERGE", "h", "g"],
        ["PFMERGE", "empty"],
        ["PFMERGE", "empty2", "missing"],
    ],
    "wrong types and corrupt": [
        ["SET", "s", "v"],
        ["PFADD", "s", "a"],
        ["PFCOUNT", "s"],
        ["PFMERGE", "s", "h"],
        ["PFADD", "h", "a"],
        ["PFMERGE", "h", "s"],
        ["PFCOUNT", "h", "s"],
        ["LPUSH", "l", "a"],
        ["PFADD", "l", "a"],
        ["PFCOUNT", "l"],
        ["PFMERGE", "d", "l"],
        ["SET", "c", CORRUPT_HLL],
        ["PFCOUNT", "c"],
        ["PFCOUNT", "c", "h"],
        ["PFMERGE", "d", "c"],
        ["SET", "c2", CORRUPT_HLL[:15] + b"\x80" + CORRUPT_HLL[16:]],
        ["PFCOUNT", "c2"],
        ["SET", "t", b"HYLL\x00" + bytes(20)],
        ["PFCOUNT", "t"],  # dense of the wrong size
        ["SET", "u", b"HYLL\x02" + bytes(20)],
        ["PFCOUNT", "u"],
    ],
}


@settings(max_examples=60, **RANDOM)
@given(
    batches=st.lists(
        st.tuples(
            st.sampled_from(["PFADD a", "PFADD b", "PFMERGE a b", "PFMERGE c a b", "PFCOUNT a"]),
            st.lists(st.integers(0, 4000), max_size=200),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_hyperloglog_bytes_match_redis(
    server: redis.Redis,
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[tuple[str, list[int]]],
) -> None:
    """Random element batches: sparse opcode splits and merges, promotion to dense at 3000
    bytes or a run above 32, merges of sparse and dense, the cached cardinality."""
    commands: list[list[str | bytes]] = []
    for name, elements in batches:
        words = name.split()
        commands.append(words + ([f"{n}" for n in elements] if words[0] == "PFADD" else []))
    run(server, tmp_path_factory.mktemp("hll"), commands)


ALL_CASES = {
    f"{family}: {name}": commands
    for family, cases in [
        ("strings", STRING_CASES),
        ("hll", HLL_CASES),
    ]
    for name, commands in cases.items()
}


@pytest.mark.parametrize("name", list(ALL_CASES))
def test_case(server: redis.Redis, tmp_path: Path, name: str) -> None:
    run(server, tmp_path, ALL_CASES[name])
