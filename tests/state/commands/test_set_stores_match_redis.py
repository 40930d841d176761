"""SINTERSTORE, SUNIONSTORE, SDIFFSTORE; ZREMRANGEBY*, ZRANGESTORE, ZUNIONSTORE, ZINTERSTORE,
ZDIFFSTORE, scores summed as doubles; SORT … STORE against a real redis-server: each case runs
the same commands on a redis-server started here and on a ShardWriter
(tests.support.redis.redis_compare ``run``): the same replies, the same keyspace after every command
and after the log is replayed."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.support.redis.redis_compare import FAR, run

pytestmark = pytest.mark.redis

# -- sets ----------------------------------------------------------------------------------
SET_CASES: dict[str, list[list[str | bytes]]] = {
    "store": [
        ["SADD", "a", "1", "2", "3", "x"],
        ["SADD", "b", "2", "3", "4"],
        ["SADD", "c", "3", "y"],
        ["SINTERSTORE", "d", "a", "b"],
        ["SINTERSTORE", "d", "a", "b", "c"],
        ["SUNIONSTORE", "d", "a", "b", "missing"],
        ["SDIFFSTORE", "d", "a", "b", "c"],
        ["SDIFFSTORE", "d", "missing", "a"],  # empty: d is deleted
        ["SADD", "d", "z"],
        ["SINTERSTORE", "d", "a", "missing"],
        ["SINTERSTORE", "a", "a", "b"],  # a source as destination
        ["SUNIONSTORE", "a", "a"],
        ["SDIFFSTORE", "e", "a"],
        ["SDIFFSTORE", "e", "a", "a"],
    ],
    "destinations and wrong types": [
        ["SADD", "a", "1"],
        ["SET", "s", "v", "PXAT", FAR],
        ["SUNIONSTORE", "s", "a"],
        ["ZADD", "z", "1", "m"],
        ["SINTERSTORE", "z", "a", "z"],
        ["SUNIONSTORE", "z", "missing", "z"],
        ["SDIFFSTORE", "d", "missing", "z"],
        ["SINTERSTORE", "d", "missing", "z"],
        ["SINTERSTORE", "d"],
        ["RPUSH", "l", "a"],
        ["SDIFFSTORE", "l", "a"],
    ],
}


# -- sorted sets ---------------------------------------------------------------------------
ZSETUP: list[list[str | bytes]] = [
    ["ZADD", "z", "1", "a", "2", "b", "2", "c", "3", "d", "-inf", "m", "inf", "n"],
    ["ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e", "0", "f"],
    ["ZADD", "mixed", "1", "d", "2", "a", "3", "e", "4", "b", "5", "c"],
]


ZSET_CASES: dict[str, list[list[str | bytes]]] = {
    "ZREMRANGEBYSCORE": [
        *ZSETUP,
        ["ZREMRANGEBYSCORE", "z", "(1", "2"],
        ["ZREMRANGEBYSCORE", "z", "5", "1"],
        ["ZREMRANGEBYSCORE", "z", "x", "1"],
        ["ZREMRANGEBYSCORE", "z", "nan", "1"],
        ["ZREMRANGEBYSCORE", "z", " 0x0", "1e400"],
        ["ZREMRANGEBYSCORE", "z", "", "("],
        ["ZREMRANGEBYSCORE", "z", "-inf", "(inf"],
        ["ZREMRANGEBYSCORE", "z", "-inf", "+inf"],
        ["ZREMRANGEBYSCORE", "missing", "0", "1"],
        ["SET", "s", "v"],
        ["ZREMRANGEBYSCORE", "s", "0", "1"],
        ["ZREMRANGEBYSCORE", "s", "x", "1"],
    ],
    "ZREMRANGEBYRANK": [
        *ZSETUP,
        ["ZREMRANGEBYRANK", "z", "-2", "-1"],
        ["ZREMRANGEBYRANK", "z", "3", "1"],
        ["ZREMRANGEBYRANK", "z", "10", "20"],
        ["ZREMRANGEBYRANK", "z", "-100", "0"],
        ["ZREMRANGEBYRANK", "z", "x", "0"],
        ["ZREMRANGEBYRANK", "z", "0", "100"],
        ["ZREMRANGEBYRANK", "z", "0", "0"],
    ],
    "ZREMRANGEBYLEX": [
        *ZSETUP,
        ["ZREMRANGEBYLEX", "lex", "(a", "[c"],
        ["ZREMRANGEBYLEX", "lex", "[e", "+"],
        ["ZREMRANGEBYLEX", "lex", "+", "-"],
        ["ZREMRANGEBYLEX", "lex", "a", "[c"],
        ["ZREMRANGEBYLEX", "lex", "[a", "+x"],
        ["ZREMRANGEBYLEX", "lex", "(d", "(d"],
        ["ZREMRANGEBYLEX", "mixed", "[b", "[d"],
        ["ZREMRANGEBYLEX", "mixed", "-", "[a"],
        ["ZREMRANGEBYLEX", "lex", "-", "+"],
        ["ZREMRANGEBYLEX", "lex", "-", "+"],
    ],
    "ZRANGESTORE": [
        *ZSETUP,
        ["ZRANGESTORE", "d", "z", "1", "-2"],
        ["ZRANGESTORE", "d", "z", "0", "1", "REV"],
        ["ZRANGESTORE", "d", "z", "(1", "3", "BYSCORE"],
        ["ZRANGESTORE", "d", "z", "3", "(1", "BYSCORE", "REV", "LIMIT", "1", "2"],
        ["ZRANGESTORE", "d", "z", "-inf", "inf", "BYSCORE", "LIMIT", "2", "-1"],
        ["ZRANGESTORE", "d", "z", "-inf", "inf", "BYSCORE", "LIMIT", "-1", "2"],
        ["ZRANGESTORE", "d", "z", "-inf", "inf", "BYSCORE", "LIMIT", "1", "0"],
        ["ZRANGESTORE", "d", "lex", "[b", "(e", "BYLEX"],
        ["ZRANGESTORE", "d", "lex", "+", "[b", "BYLEX", "REV", "LIMIT", "1", "10"],
        ["ZRANGESTORE", "d", "mixed", "[b", "+", "BYLEX"],
        ["ZRANGESTORE", "d", "mixed", "[c", "-", "BYLEX", "REV"],
        ["ZRANGESTORE", "d", "z", "0", "-1", "LIMIT", "0", "1"],
        ["ZRANGESTORE", "d", "z", "0", "-1", "LIMIT", "0", "-1"],
        ["ZRANGESTORE", "d", "z", "0", "-1", "WITHSCORES"],
        ["ZRANGESTORE", "d", "z", "0", "-1", "REV", "REV"],
        ["ZRANGESTORE", "d", "z", "a", "b", "BYLEX", "BYSCORE"],
        ["ZRANGESTORE", "d", "z", "a", "b", "BYSCORE"],
        ["ZRANGESTORE", "d", "z", "a", "b"],
        ["ZRANGESTORE", "d", "lex", "a", "b", "BYLEX"],
        ["ZRANGESTORE", "d", "missing", "0", "-1"],  # empty: d is deleted
        ["SET", "s", "v"],
        ["ZRANGESTORE", "s", "z", "0", "0"],
        ["ZRANGESTORE", "d", "s", "0", "0"],
        ["ZRANGESTORE", "d", "z", "5", "1"],
        ["ZRANGESTORE", "z", "z", "1", "2"],
    ],
    "ZUNIONSTORE and ZINTERSTORE": [
        *ZSETUP,
        ["SADD", "set", "a", "b", "q"],
        ["ZUNIONSTORE", "d", "2", "z", "set"],
        ["ZINTERSTORE", "d", "2", "z", "set"],
        ["ZUNIONSTORE", "d", "3", "z", "set", "mixed", "WEIGHTS", "2", "-1", "0.5"],
        ["ZINTERSTORE", "d", "2", "z", "mixed", "WEIGHTS", "0", "1", "AGGREGATE", "MAX"],
        ["ZUNIONSTORE", "d", "2", "z", "z", "AGGREGATE", "min", "WEIGHTS", "1", "-1"],
        ["ZUNIONSTORE", "d", "2", "z", "mixed", "WEIGHTS", "inf", "-inf"],
        ["ZINTERSTORE", "d", "2", "z", "z", "WEIGHTS", "1", "-1"],  # inf + -inf: 0
        ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS", "0"],  # 0 * inf: 0
        ["ZINTERSTORE", "d", "2", "z", "missing"],  # empty: d is deleted
        ["ZUNIONSTORE", "d", "2", "missing", "missing2"],
        ["ZADD", "p", "0.1", "a", "0.2", "b"],
        ["ZADD", "q", "0.2", "a", "0.7", "b"],
        ["ZUNIONSTORE", "d", "3", "p", "q", "p", "WEIGHTS", "3", "0.3", "1e-5"],
        ["ZINTERSTORE", "d", "2", "p", "q", "AGGREGATE", "SUM", "WEIGHTS", "1.1", "2.2"],
        ["ZUNIONSTORE", "d", "0", "z"],
        ["ZUNIONSTORE", "d", "-1", "z"],
        ["ZUNIONSTORE", "d", "3", "z", "set"],
        ["ZUNIONSTORE", "d", "x", "z"],
        ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS"],
        ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS", "x"],
        ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS", "nan"],
        ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS", "1e400"],
        ["ZUNIONSTORE", "d", "1", "z", "AGGREGATE", "AVG"],
        ["ZUNIONSTORE", "d", "1", "z", "WITHSCORES"],
        ["SET", "s", "v"],
        ["ZUNIONSTORE", "d", "2", "z", "s", "WEIGHTS", "x"],
        ["ZUNIONSTORE", "s", "1", "set"],  # a string destination is overwritten
        ["ZINTERSTORE", "set", "2", "set", "z"],
    ],
    "ZDIFFSTORE": [
        *ZSETUP,
        ["SADD", "set", "a", "b", "q"],
        ["ZDIFFSTORE", "d", "2", "z", "set"],
        ["ZDIFFSTORE", "d", "2", "set", "z"],
        ["ZDIFFSTORE", "d", "2", "z", "z"],
        ["ZDIFFSTORE", "d", "1", "missing"],
        ["ZDIFFSTORE", "d", "1", "z", "WEIGHTS", "1"],
        ["ZDIFFSTORE", "d", "1", "z", "AGGREGATE", "SUM"],
        ["ZDIFFSTORE", "d", "3", "z", "set", "missing"],
        ["ZDIFFSTORE", "z", "1", "mixed"],
    ],
}


def test_scores_are_doubles_summed_in_redis_order(server: redis.Redis, tmp_path: Path) -> None:
    """Sources from the smallest to the largest (ties in argument order): the sums round
    differently in another order."""
    replies = run(
        server,
        tmp_path,
        [
            ["ZADD", "x", "1e16", "m", "1", "o"],
            ["ZADD", "y", "1", "m"],
            ["ZADD", "w", "-1e16", "m"],
            ["ZUNIONSTORE", "d", "3", "x", "y", "w"],
            ["ZUNIONSTORE", "d", "3", "y", "w", "x"],
            ["ZINTERSTORE", "d", "3", "x", "w", "y"],
            ["ZADD", "i", "inf", "m"],
            ["ZADD", "j", "-inf", "m"],
            ["ZUNIONSTORE", "d", "3", "i", "j", "y"],
            ["ZUNIONSTORE", "d", "3", "y", "i", "j"],
        ],
    )
    assert replies[3:6] == [2, 2, 1]


# -- SORT … STORE --------------------------------------------------------------------------
SORT_SETUP: list[list[str | bytes]] = [
    ["RPUSH", "l", "3", "10", "2.5", "-1", "10", "0x10", " 7"],
    ["RPUSH", "words", "b", "a", "c", "B", "", "a"],
    ["SADD", "s", "5", "3", "x", "1"],
    ["ZADD", "z", "3", "a", "1", "b", "2", "c"],
    ["SET", "w_a", "2"],
    ["SET", "w_b", "2"],
    ["SET", "w_c", "1"],
    ["SET", "w_x", "z"],
    ["HSET", "h_a", "f", "9", "g", "A"],
    ["HSET", "h_c", "f", "-9"],
    ["SET", "h_b", "nothash"],
    ["MSET", "v_a", "x", "v_b", "y", "v_c", "w"],
]


SORT_CASES: dict[str, list[list[str | bytes]]] = {
    "numbers": [
        *SORT_SETUP,
        ["SORT", "l", "STORE", "d"],
        ["SORT", "l", "DESC", "STORE", "d"],
        ["SORT", "l", "LIMIT", "1", "3", "STORE", "d"],
        ["SORT", "l", "LIMIT", "-5", "2", "STORE", "d"],
        ["SORT", "l", "LIMIT", "10", "2", "STORE", "d"],  # empty: d is deleted
        ["SORT", "l", "LIMIT", "2", "-7", "STORE", "d"],
        ["SORT", "z", "STORE", "d"],
        ["SORT", "words", "STORE", "d"],  # not numbers: nothing is stored
        ["SORT", "s", "STORE", "d"],
        ["SORT", "missing", "STORE", "d"],
    ],
    "alpha": [
        *SORT_SETUP,
        ["SORT", "words", "ALPHA", "STORE", "d"],
        ["SORT", "words", "ALPHA", "DESC", "LIMIT", "0", "3", "STORE", "d"],
        ["SORT", "s", "ALPHA", "STORE", "d"],
        ["SORT", "z", "ALPHA", "DESC", "STORE", "d"],
    ],
    "by and get": [
        *SORT_SETUP,
        ["SORT", "z", "BY", "w_*", "STORE", "d"],
        ["SORT", "z", "BY", "w_*", "DESC", "STORE", "d"],
        ["SORT", "z", "BY", "v_*", "ALPHA", "STORE", "d"],
        ["SORT", "z", "BY", "v_*", "ALPHA", "DESC", "STORE", "d"],
        ["SORT", "z", "BY", "h_*->f", "GET", "#", "GET", "h_*->g", "GET", "w_*", "STORE", "d"],
        ["SORT", "z", "BY", "h_*->f", "LIMIT", "1", "1", "STORE", "d"],
        ["SORT", "words", "BY", "w_*", "ALPHA", "STORE", "d"],
        ["SORT", "words", "BY", "w_*", "GET", "nostar", "STORE", "d"],
        ["SORT", "s", "BY", "w_*", "STORE", "d"],  # w_x is not a number
        ["SORT", "z", "BY", "h_*->", "STORE", "d"],
        ["SORT", "z", "BY", "*->f", "STORE", "d"],
    ],
    "no sort": [
        *SORT_SETUP,
        ["SORT", "l", "BY", "nosort", "STORE", "d"],
        ["SORT", "l", "BY", "nosort", "DESC", "LIMIT", "1", "2", "STORE", "d"],
        ["SORT", "z", "BY", "nosort", "DESC", "STORE", "d"],
        ["SORT", "z", "BY", "nosort", "LIMIT", "1", "5", "STORE", "d"],
        ["SORT", "s", "BY", "nosort", "STORE", "d"],  # a set is sorted ALPHA for STORE
        ["SORT", "s", "BY", "nosort", "DESC", "STORE", "d"],
    ],
    "destinations and errors": [
        *SORT_SETUP,
        ["SET", "d", "v", "PXAT", FAR],
        ["SORT", "l", "STORE", "d"],
        ["SORT", "l", "STORE", "d", "STORE", "e"],
        ["SORT", "w_a", "STORE", "d"],
        ["SORT", "l", "LIMIT", "1"],
        ["SORT", "l", "LIMIT", "x", "1", "STORE", "d"],
        ["SORT", "l", "STORE"],
        ["SORT", "l", "FOO", "STORE", "d"],
        ["SORT", "l", "BY"],
        ["SORT", "l", "STORE", "l"],
    ],
}


ALL_CASES = {
    f"{family}: {name}": commands
    for family, cases in [
        ("sets", SET_CASES),
        ("zsets", ZSET_CASES),
        ("sort", SORT_CASES),
    ]
    for name, commands in cases.items()
}


@pytest.mark.parametrize("name", list(ALL_CASES))
def test_case(server: redis.Redis, tmp_path: Path, name: str) -> None:
    run(server, tmp_path, ALL_CASES[name])
