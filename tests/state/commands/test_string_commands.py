"""Strings, bitmaps and HyperLogLogs: one case per write command (SET and its options, SETNX,
SETEX, GETSET, GETDEL, APPEND, INCR, MSET, SETRANGE, SETBIT, BITOP, BITFIELD, PFADD): the reply,
the c/u/d of each key it wrote, and the key's value afterwards
(tests.support.redis.command_cases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.redis.command_cases import NOW_MS, Case, run_case

CASES: dict[str, Case] = {
    "SET new": ([], ["SET", "k", "v"], b"OK", [("k", "c")], "k", ("string", b"v", None)),
    "SET NX exists": (
        [["SET", "k", "a"]],
        ["SET", "k", "b", "NX"],
        None,
        [],
        "k",
        ("string", b"a", None),
    ),
    "SET XX GET PX": (
        [["SET", "k", "a"]],
        ["SET", "k", "b", "XX", "GET", "PX", "500"],
        b"a",
        [("k", "u")],
        "k",
        ("string", b"b", NOW_MS + 500),
    ),
    "SET KEEPTTL": (
        [["SET", "k", "a", "EX", "9"]],
        ["SET", "k", "b", "KEEPTTL"],
        b"OK",
        [("k", "u")],
        "k",
        ("string", b"b", NOW_MS + 9000),
    ),
    "SET PXAT past": (
        [["SET", "k", "a"]],
        ["SET", "k", "b", "PXAT", "1"],
        b"OK",
        [("k", "d")],
        "k",
        None,
    ),
    "SETNX": ([], ["SETNX", "k", "v"], 1, [("k", "c")], "k", ("string", b"v", None)),
    "SETEX": (
        [],
        ["SETEX", "k", "10", "v"],
        b"OK",
        [("k", "c")],
        "k",
        ("string", b"v", NOW_MS + 10_000),
    ),
    "PSETEX": (
        [],
        ["PSETEX", "k", "10", "v"],
        b"OK",
        [("k", "c")],
        "k",
        ("string", b"v", NOW_MS + 10),
    ),
    "GETSET clears TTL": (
        [["SET", "k", "a", "EX", "9"]],
        ["GETSET", "k", "b"],
        b"a",
        [("k", "u")],
        "k",
        ("string", b"b", None),
    ),
    "GETDEL": ([["SET", "k", "a"]], ["GETDEL", "k"], b"a", [("k", "d")], "k", None),
    "APPEND": (
        [["SET", "k", "a"]],
        ["APPEND", "k", "bc"],
        3,
        [("k", "u")],
        "k",
        ("string", b"abc", None),
    ),
    "INCR new": ([], ["INCR", "n"], 1, [("n", "c")], "n", ("string", b"1", None)),
    "DECRBY": (
        [["SET", "n", "5"]],
        ["DECRBY", "n", "7"],
        -2,
        [("n", "u")],
        "n",
        ("string", b"-2", None),
    ),
    "INCRBYFLOAT": (
        [["SET", "n", "10.5"]],
        ["INCRBYFLOAT", "n", "0.1"],
        b"10.6",
        [("n", "u")],
        "n",
        ("string", b"10.6", None),
    ),
    "MSET": (
        [["SET", "a", "0"]],
        ["MSET", "a", "1", "b", "2"],
        b"OK",
        [("a", "u"), ("b", "c")],
        "b",
        ("string", b"2", None),
    ),
    "MSETNX refused": ([["SET", "a", "0"]], ["MSETNX", "a", "1", "b", "2"], 0, [], "b", None),
    "SETRANGE": (
        [["SET", "k", "hello"]],
        ["SETRANGE", "k", "6", "world"],
        11,
        [("k", "u")],
        "k",
        ("string", b"hello\x00world", None),
    ),
    "SETBIT new": (
        [],
        ["SETBIT", "b", "9", "1"],
        0,
        [("b", "c")],
        "b",
        ("string", b"\x00\x40", None),
    ),
    "BITOP AND": (
        [["SET", "a", "ab"], ["SET", "b", "c"]],
        ["BITOP", "AND", "d", "a", "b"],
        2,
        [("d", "c")],
        "d",
        ("string", b"a\x00", None),
    ),
    "BITOP empty deletes": (
        [["SET", "d", "x"]],
        ["BITOP", "OR", "d", "m1", "m2"],
        0,
        [("d", "d")],
        "d",
        None,
    ),
    "BITFIELD": (
        [],
        ["BITFIELD", "f", "SET", "u8", "0", "255", "INCRBY", "i8", "0", "1"],
        [0, 0],
        [("f", "c")],
        "f",
        ("string", b"\x00", None),
    ),
    "PFADD": (
        [],
        ["PFADD", "h", "a"],
        1,
        [("h", "c")],
        "h",
        ("string", b"HYLL\x01" + bytes(10) + b"\x80q\xa6\x84NW", None),
    ),  # as Redis has it
}


@pytest.mark.parametrize("name", list(CASES))
def test_command(shard: Path, name: str) -> None:
    run_case(shard, name, CASES[name])
