"""Stream counters and consumer groups against a real redis-server (7.0): XADD, XDEL, XTRIM,
XSETID, XGROUP (CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER), XCLAIM with every
option, XACK.

Each case runs the same commands on a redis-server started here and on a ShardWriter, and
requires the same reply (or error text) for every command and, after every command, the same
streams as ``XINFO STREAM <key> FULL`` shows them: entries, last ID, max deleted ID, entries
added, groups with last delivered ID, entries read, pending entries (consumer, delivery time,
delivery count) and consumers (seen time). Times are each side's own clock, so they are
compared within ``SLACK_MS``; absolute times given with ``TIME`` are compared exactly. The
``c``/``u``/``d`` of each record must match the key's existence, a record must exist for every
changed key, and the log must replay to the same keyspace, times included (the harness of
tests/support/redis/redis_compare.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from moonish.state.shard import ShardWriter
from moonish.values.model import STREAM
from tests.support.redis.redis_compare import State
from tests.support.redis.redis_compare import run as run_both
from tests.support.servers.redis_server import (
    comparable,
    raw_client,
    redis_entry,
    redis_server,
    redis_stream,
    split_times,
    stream_state,
)

pytestmark = pytest.mark.redis

SLACK_MS = 1000
T = "1700000000000"  # an absolute delivery time (ms) both sides keep as given


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis")) as client:
        connection = raw_client(client)
        yield connection
        connection.close()


def _theirs(raw: redis.Redis) -> State:
    state: State = {}
    for key in raw.execute_command("KEYS", "*"):
        if raw.execute_command("TYPE", key) == b"stream":
            expire = raw.execute_command("PEXPIRETIME", key)
            state[(0, key)] = (redis_stream(raw, key), None if expire < 0 else expire)
        else:
            state[(0, key)] = comparable(redis_entry(raw, key))
    return state


def _ours(writer: ShardWriter) -> State:
    state: State = {}
    for db, key, entry in writer.keyspace.items():
        if entry.type == STREAM:
            state[(db, key)] = (stream_state(entry.value), entry.expire_at_ms)
        else:
            state[(db, key)] = comparable(entry)
    return state


def _same(ours: State, theirs: State, argv: list[bytes]) -> None:
    """Equal, but for times (each side's clock), which may differ by ``SLACK_MS``."""
    assert ours.keys() == theirs.keys(), argv
    for key, mine in ours.items():
        if isinstance(mine[0], str):  # not a stream: comparable()'s (type, value, expiry)
            assert mine == theirs[key], (argv, key)
            continue
        bare, delivered, seen = split_times(mine[0])
        their_bare, their_delivered, their_seen = split_times(theirs[key][0])
        assert (bare, mine[1]) == (their_bare, theirs[key][1]), (argv, key)
        for a, b in zip(delivered + seen, their_delivered + their_seen, strict=True):
            assert abs(a - b) <= SLACK_MS, (argv, key, a, b)


def run(raw: redis.Redis, tmp_path: Path, commands: list[list[str | bytes]]) -> list[Any]:
    """tests/support/redis/redis_compare.py's ``run`` with whole streams (module docstring)."""
    return run_both(raw, tmp_path, commands, redis_state=_theirs, our_state=_ours, same_state=_same)


CASES: dict[str, list[list[str | bytes]]] = {
    "counters": [
        ["XADD", "s", "1-1", "f", "v"],
        ["XADD", "s", "1-*", "f", "v"],
        ["XADD", "s", "2", "f", "v"],
        ["XDEL", "s", "1-2", "9-9", "1-2"],
        ["XDEL", "s", "1-1"],
        ["XTRIM", "s", "MAXLEN", "0"],
        ["XADD", "s", "MAXLEN", "=", "1", "3-0", "f", "v", "g", "w"],
        ["XADD", "s", "MINID", "4", "4-0", "a", "b"],
        ["XDEL", "s", "3-5"],
        ["XADD", "s", "NOMKSTREAM", "5-0", "a", "b"],
        ["XADD", "t", "NOMKSTREAM", "*", "a", "b"],
        ["XDEL", "s", "5-0", "4-0"],
        ["XSETID", "s", "10-0", "ENTRIESADDED", "9", "MAXDELETEDID", "6-0"],
        ["XSETID", "s", "11-0", "MAXDELETEDID", "0-0"],
        ["XSETID", "s", "12-0", "ENTRIESADDED", "0"],
        ["XADD", "s", "12-*", "x", "y"],
    ],
    "ID syntax": [
        ["XADD", "s", "01-02", "f", "v"],
        ["XADD", "s", "+3-1", "f", "v"],
        ["XADD", "s", " 4", "f", "v"],
        ["XADD", "s", "5-*-*", "f", "v"],
        ["XADD", "s", "-", "f", "v"],
        ["XADD", "s", "+", "f", "v"],
        ["XADD", "s", "6--1", "f", "v"],
        ["XADD", "s", "7-", "f", "v"],
        ["XADD", "s", "18446744073709551615-18446744073709551614", "f", "v"],
        ["XADD", "s", "18446744073709551615-*", "f", "v"],
        ["XADD", "s", "*", "f", "v"],
        ["XADD", "s", "-18446744073709551615", "f", "v"],
        ["XADD", "x", "LIMIT", "5", "*", "f", "v"],
        ["XADD", "x", "MAXLEN", "1", "LIMIT", "5", "*", "f", "v"],
        ["XADD", "x", "MAXLEN", "1", "MINID", "1", "*", "f", "v"],
        ["XADD", "x", "MAXLEN", "~", "1", "LIMIT", "-1", "*", "f", "v"],
        ["XADD", "x", "MAXLEN", "-1", "*", "f", "v"],
        ["XTRIM", "x"],
        ["XTRIM", "x", "LIMIT", "1"],
        ["XTRIM", "x", "FOO", "1"],
        ["XADD", "x", "MAXLEN"],
        ["XADD", "x", "0-0", "f", "v"],
        ["XADD", "x", "0-*", "f", "v"],
        ["XADD", "x", "1", "f"],
    ],
    "XGROUP": [
        ["XGROUP", "CREATE", "s", "g", "$"],
        ["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"],
        ["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"],
        ["XADD", "s", "1-1", "f", "v"],
        ["XGROUP", "CREATE", "s", "h", "0", "ENTRIESREAD", "7"],
        ["XGROUP", "create", "s", "i", "$", "ENTRIESREAD", "-1"],
        ["XGROUP", "CREATE", "s", "j", "-"],
        ["XGROUP", "CREATE", "s", "j", "x"],
        ["XGROUP", "CREATE", "s", "j", "1", "ENTRIESREAD", "-2"],
        ["XGROUP", "CREATE", "s", "j", "1", "ENTRIESREAD", "x"],
        ["XGROUP", "CREATE", "s", "j", "1", "FOO"],
        ["XGROUP", "CREATE", "s", "j", "1", "MKSTREAM", "MKSTREAM", "ENTRIESREAD", "1"],
        ["XGROUP", "CREATE", "s", "j", "1", "ENTRIESREAD"],
        ["XGROUP", "CREATE", "s"],
        ["XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD", "3"],
        ["XGROUP", "SETID", "s", "h", "$"],
        ["XGROUP", "SETID", "s", "h", "+"],
        ["XGROUP", "SETID", "s", "h", "-"],
        ["XGROUP", "SETID", "s", "nope", "1"],
        ["XGROUP", "SETID", "s", "h", "1", "MKSTREAM"],
        ["XGROUP", "SETID", "s", "h", "1", "ENTRIESREAD", "1", "X"],
        ["XGROUP", "SETID", "t", "h", "1"],
        ["XGROUP", "CREATECONSUMER", "s", "g", "alice"],
        ["XGROUP", "CREATECONSUMER", "s", "g", "alice"],
        ["XGROUP", "CREATECONSUMER", "s", "nope", "a"],
        ["XGROUP", "DELCONSUMER", "s", "g", "bob"],
        ["XGROUP", "DELCONSUMER", "s", "g", "alice"],
        ["XGROUP", "DESTROY", "s", "nope"],
        ["XGROUP", "DESTROY", "s", "h"],
        ["XGROUP", "DESTROY", "t", "h"],
        ["XGROUP", "FOO", "s", "g"],
        ["XGROUP"],
        ["XGROUP", "DESTROY", "s"],
        ["SET", "str", "v"],
        ["XGROUP", "CREATE", "str", "g", "$", "MKSTREAM"],
        ["XGROUP", "DESTROY", "str", "g"],
        ["XGROUP", "CREATE", "str", "g", "$", "ENTRIESREAD", "x"],
    ],
    "XCLAIM options": [
        ["XADD", "s", "1-0", "a", "1"],
        ["XADD", "s", "2-0", "b", "2"],
        ["XADD", "s", "3-0", "c", "3"],
        ["XGROUP", "CREATE", "s", "g", "0"],
        # what XREADGROUP propagates: LASTID moves the group, FORCE creates the PEL entry
        [
            "XCLAIM",
            "s",
            "g",
            "alice",
            "0",
            "1-0",
            "TIME",
            T,
            "RETRYCOUNT",
            "1",
            "FORCE",
            "JUSTID",
            "LASTID",
            "1-0",
        ],
        [
            "XCLAIM",
            "s",
            "g",
            "bob",
            "0",
            "2-0",
            "TIME",
            T,
            "RETRYCOUNT",
            "4",
            "FORCE",
            "JUSTID",
            "LASTID",
            "2-0",
        ],
        ["XCLAIM", "s", "g", "bob", "0", "3-0", "FORCE"],  # count 2: created 1, then +1
        ["XCLAIM", "s", "g", "carol", "0", "1-0"],  # reply with the entry, count + 1
        ["XCLAIM", "s", "g", "carol", "3600000", "2-0"],  # idle enough: claimed
        ["XCLAIM", "s", "g", "bob", "3600000", "2-0"],  # just claimed: not idle enough
        ["XCLAIM", "s", "g", "bob", "-5", "2-0", "IDLE", "60000", "JUSTID"],
        ["XCLAIM", "s", "g", "bob", "0", "2-0", "IDLE", "-1"],  # a bogus time becomes now
        ["XCLAIM", "s", "g", "bob", "0", "2-0", "TIME", "99999999999999"],  # in the future
        ["XCLAIM", "s", "g", "bob", "0", "2-0", "RETRYCOUNT", "-3"],
        ["XCLAIM", "s", "g", "dave", "0", "9-0", "FORCE"],  # no such entry: nothing
        ["XCLAIM", "s", "g", "dave", "0", "1-0", "2-0", "1-0", "JUSTID", "TIME", T],
        ["XCLAIM", "s", "g", "dave", "0", "1-0", "LASTID", "9-0"],  # the group moves
        ["XCLAIM", "s", "g", "dave", "0", "5-0", "LASTID", "10-0"],  # nothing claimed: moves
        ["XCLAIM", "s", "g", "dave", "0", "5-0", "LASTID", "1-0"],  # never backwards
        ["XDEL", "s", "2-0"],
        ["XCLAIM", "s", "g", "erin", "0", "2-0"],  # deleted entry: its PEL entry goes
        ["XCLAIM", "s", "g", "erin", "x", "1-0"],
        ["XCLAIM", "s", "g", "erin", "0", "1-0", "IDLE"],
        ["XCLAIM", "s", "g", "erin", "0", "1-0", "IDLE", "x"],
        ["XCLAIM", "s", "g", "erin", "0", "1-0", "TIME", "x"],
        ["XCLAIM", "s", "g", "erin", "0", "1-0", "RETRYCOUNT", "x"],
        ["XCLAIM", "s", "g", "erin", "0", "1-0", "LASTID", "+"],
        ["XCLAIM", "s", "g", "erin", "0", "1-0", "BOGUS"],
        ["XCLAIM", "s", "nope", "erin", "0", "1-0"],
        ["XCLAIM", "t", "g", "erin", "x", "1-0"],
        ["XCLAIM", "s", "g", "erin", "0"],
        ["SET", "str", "v"],
        ["XCLAIM", "str", "g", "c", "0", "1-0"],
        ["XGROUP", "DELCONSUMER", "s", "g", "dave"],  # its pending entries go with it
    ],
    "XACK": [
        ["XADD", "s", "1-0", "a", "1"],
        ["XADD", "s", "2-0", "b", "2"],
        ["XGROUP", "CREATE", "s", "g", "0"],
        ["XCLAIM", "s", "g", "c", "0", "1-0", "2-0", "FORCE", "TIME", T],
        ["XACK", "s", "g", "1-0", "1-0", "7-0"],
        ["XACK", "s", "g", "1-0"],
        ["XACK", "s", "nope", "x"],
        ["XACK", "t", "g", "x"],
        ["XACK", "s", "g", "x"],
        ["XACK", "s", "g", "2"],
        ["XACK", "s", "g"],
        ["SET", "str", "v"],
        ["XACK", "str", "g", "1-0"],
    ],
    "copies and renames keep groups": [
        ["XADD", "s", "1-0", "a", "1"],
        ["XGROUP", "CREATE", "s", "g", "0", "ENTRIESREAD", "0"],
        ["XCLAIM", "s", "g", "c", "0", "1-0", "FORCE", "TIME", T],
        ["COPY", "s", "t"],
        ["XACK", "t", "g", "1-0"],
        ["RENAME", "s", "u"],
        ["XGROUP", "DESTROY", "u", "g"],
        ["XGROUP", "CREATECONSUMER", "t", "g", "d"],
    ],
}


@pytest.mark.parametrize("name", list(CASES))
def test_case(raw: redis.Redis, tmp_path: Path, name: str) -> None:
    run(raw, tmp_path, CASES[name])


# -- XSETID ----------------------------------------------------------------------------------
def test_xsetid(server: redis.Redis, tmp_path: Path) -> None:
    """The last ID it sets decides which IDs XADD accepts next (moonish keeps no
    ENTRIESADDED/MAXDELETEDID counters, but checks them as Redis does)."""
    run(
        server,
        tmp_path,
        [
            ["XADD", "x", "1-1", "f", "v"],
            ["XSETID", "x", "0-5"],
            ["XSETID", "x", "5-0"],
            ["XADD", "x", "3-0", "f", "v"],
            ["XADD", "x", "5-*", "f", "v"],
            [
                "XADD",
                "x",
                "1700000000000-*",
                "g",
                "w",
            ],  # not "*": the two clocks may differ by 1 ms
            ["XSETID", "x", "9999999999999", "ENTRIESADDED", "1"],
            ["XSETID", "x", "9999999999999", "ENTRIESADDED", "-1"],
            ["XSETID", "x", "9999999999999", "MAXDELETEDID", "99999999999999-0"],
            ["XSETID", "x", "9999999999999-3", "MAXDELETEDID", "8-0", "ENTRIESADDED", "5"],
            ["XADD", "x", "9999999999999-3", "f", "v"],
            ["XADD", "x", "9999999999999-*", "f", "v"],
            ["XSETID", "missing", "1-1"],
            ["SET", "s", "v"],
            ["XSETID", "s", "1"],
            ["XSETID", "x", "bad"],
            ["XSETID", "x", "99999999999999", "FOO"],
            ["XSETID", "x", "-"],
            ["XSETID", "x", "99999999999999", "ENTRIESADDED"],
            ["XTRIM", "x", "MAXLEN", "0"],
            ["XSETID", "x", "0-1"],
            ["XADD", "x", "0-2", "f", "v"],  # an empty stream takes any ID
        ],
    )
