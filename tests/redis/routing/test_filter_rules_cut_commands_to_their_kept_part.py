"""What a source filter makes of each command (moonish.redis.routing.keyfilter), without a
server: kept, left out, cut down to the kept keys' part, or refused as a conflict; bad
patterns and filters refused by name. (Against redis-server:
test_source_filters_keep_redis_state.py.)"""

from __future__ import annotations

import pytest

from moonish.errors import InvalidArgumentError
from moonish.keypatterns import glob_regex
from moonish.redis.routing.keyfilter import FilterConflictError, KeyFilter, filter_spec

TMP = KeyFilter(filter_spec(exclude_keys=["tmp:*"]))


def run(argv: list[bytes], key_filter: KeyFilter = TMP, db: int = 0) -> list[bytes] | None:
    return key_filter.command(db, argv, lambda db, key: key in (b"held",), path="a.aof", offset=9)


@pytest.mark.parametrize(
    ("argv", "becomes"),
    [
        ([b"SET", b"a", b"1"], [b"SET", b"a", b"1"]),
        ([b"SET", b"tmp:a", b"1"], None),
        ([b"DEL", b"a", b"tmp:a", b"b"], [b"DEL", b"a", b"b"]),
        ([b"MSET", b"tmp:a", b"1", b"b", b"2"], [b"MSET", b"b", b"2"]),
        ([b"MSETNX", b"a", b"1", b"tmp:b", b"2"], [b"MSETNX", b"a", b"1"]),
        ([b"RENAME", b"a", b"tmp:a"], [b"DEL", b"a"]),
        ([b"SMOVE", b"s", b"tmp:s", b"m"], [b"SREM", b"s", b"m"]),
        ([b"SMOVE", b"tmp:s", b"s", b"m"], [b"SADD", b"s", b"m"]),
        ([b"LMOVE", b"l", b"tmp:l", b"RIGHT", b"LEFT"], [b"RPOP", b"l"]),
        ([b"RPOPLPUSH", b"l", b"tmp:l"], [b"RPOP", b"l"]),
        ([b"COPY", b"a", b"tmp:a"], None),
        ([b"SUNIONSTORE", b"tmp:u", b"a", b"b"], None),
        ([b"BITOP", b"AND", b"tmp:d", b"a"], None),
        ([b"SORT", b"l", b"STORE", b"tmp:sorted"], None),
        ([b"FLUSHALL"], [b"FLUSHALL"]),
        ([b"FLUSHDB"], [b"FLUSHDB"]),
    ],
)
def test_a_command_becomes_its_kept_part(argv: list[bytes], becomes: list[bytes] | None) -> None:
    assert run(argv) == becomes


@pytest.mark.parametrize(
    "argv",
    [
        [b"RENAME", b"tmp:a", b"a"],
        [b"COPY", b"tmp:a", b"a"],
        [b"LMOVE", b"tmp:l", b"l", b"LEFT", b"LEFT"],
        [b"SUNIONSTORE", b"u", b"a", b"tmp:b"],
        [b"ZUNIONSTORE", b"z", b"2", b"a", b"tmp:b"],
        [b"PFMERGE", b"h", b"tmp:h"],
        [b"SORT", b"l", b"BY", b"w_*", b"STORE", b"dst"],
    ],
)
def test_a_kept_key_computed_from_one_left_out_is_a_conflict(argv: list[bytes]) -> None:
    with pytest.raises(FilterConflictError) as caught:
        run(argv)
    assert caught.value.path == "a.aof" and caught.value.offset == 9
    assert "docs/filters.md" in caught.value.message


def test_dbs_leave_out_other_dbs_and_refuse_flows_into_a_kept_db() -> None:
    dbs = KeyFilter(filter_spec(dbs=[0]))
    assert run([b"SET", b"a", b"1"], dbs, db=1) is None
    assert run([b"FLUSHDB"], dbs, db=1) is None
    assert run([b"MOVE", b"a", b"3"], dbs) == [b"DEL", b"a"]
    assert run([b"COPY", b"a", b"b", b"DB", b"2"], dbs) is None
    assert run([b"SWAPDB", b"1", b"2"], dbs) is None
    for argv, db in (([b"MOVE", b"a", b"0"], 1), ([b"SWAPDB", b"0", b"1"], 0)):
        with pytest.raises(FilterConflictError):
            run(argv, dbs, db)
    assert dict(dbs.counts) == {"dbs": 5}


def test_types_turn_writes_of_a_type_left_out_into_deletes() -> None:
    types = KeyFilter(filter_spec(types=["string", "hash"]))
    assert run([b"HSET", b"h", b"f", b"v"], types) == [b"HSET", b"h", b"f", b"v"]
    assert run([b"RPUSH", b"l", b"1"], types) == [b"DEL", b"l"]
    assert run([b"SUNIONSTORE", b"held", b"s1", b"s2"], types) == [b"DEL", b"held"]
    assert run([b"RENAME", b"list", b"held"], types) == [b"DEL", b"held"]  # not held: a list
    assert run([b"RENAME", b"held", b"other"], types) == [b"RENAME", b"held", b"other"]
    assert run([b"COPY", b"list", b"held"], types) is None
    assert run([b"COPY", b"list", b"held", b"REPLACE"], types) == [b"DEL", b"held"]
    assert run([b"SORT", b"s", b"STORE", b"held"], types) == [b"DEL", b"held"]
    restore = [b"RESTORE", b"k", b"0", b"\x0e\x01\x02"]  # a quicklist payload: a list
    assert run(restore, types) == [b"DEL", b"k"]
    assert types.counts == {"types:list": 3, "types:set": 1, "types": 3}


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("a*", [b"a", b"abc"], [b"ba"]),
        ("a?c", [b"abc", b"a\nc"], [b"ac", b"abbc"]),
        ("[a-c]x", [b"ax", b"cx"], [b"dx", b"x"]),
        ("[c-a]x", [b"bx"], [b"dx"]),  # Redis swaps a reversed range
        ("[^a]x", [b"bx"], [b"ax"]),
        ("h\\*", [b"h*"], [b"hx"]),
        ("[\\]]", [b"]"], [b"\\"]),
        ("*\xff*", ["\xff".encode("utf-8", "surrogateescape")], [b"a"]),
    ],
)
def test_glob_patterns_read_as_redis_reads_them(
    pattern: str, matches: list[bytes], misses: list[bytes]
) -> None:
    regex = glob_regex(pattern.encode("utf-8", "surrogateescape"))
    assert all(regex.fullmatch(key) for key in matches)
    assert not any(regex.fullmatch(key) for key in misses)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"exclude_keys": ["a["]}, "has an unclosed ["),
        ({"include_keys": ["a\\"]}, "ends with a lone backslash"),
        ({"dbs": [16]}, "dbs must name one or more of 0..15"),
        ({"types": ["strings"]}, "types must name one or more of"),
        ({"types": ["zset", "string"]}, "types keeps zset but not set"),
    ],
)
def test_a_filter_moonish_would_misread_is_refused(kwargs: dict, says: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        filter_spec(**kwargs)
    assert says in caught.value.message
