"""Redis 7.4 hash-field expiry commands against a real Redis 7.4: replies, errors, values, field
times and c/u/d, in fixed cases, random sequences and with relative times."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.redis.hash_ttls import (
    FAR,
    FAR_S,
    LATER,
    PAST,
    SOONER,
    redis_hash,
    run,
)
from tests.support.servers.redis_server import redis74_binary, redis_server, shard_writer

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis74"), binary=redis74_binary()) as client:
        assert client.info("server")["redis_version"].startswith("7.4.")
        yield client


HSET3 = ["HSET", "h", "a", "1", "b", "2", "c", "3"]


CASES: dict[str, list[list[str]]] = {
    "set, conditions on fields without and with a time": [
        HSET3,
        ["HPEXPIREAT", "h", FAR, "XX", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", FAR, "GT", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", FAR, "LT", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", LATER, "NX", "FIELDS", "2", "a", "b"],
        ["HPEXPIREAT", "h", LATER, "gt", "FIELDS", "3", "a", "b", "c"],
        ["HPEXPIREAT", "h", FAR, "GT", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", SOONER, "LT", "FIELDS", "2", "a", "b"],
        ["HPEXPIREAT", "h", LATER, "LT", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", FAR, "xx", "FIELDS", "3", "a", "c", "zz"],
        ["HEXPIREAT", "h", FAR_S, "FIELDS", "1", "c"],
        ["hpexpireat", "h", FAR, "fields", "1", "a"],
    ],
    "past times delete fields, the last one the key": [
        HSET3,
        ["HPEXPIREAT", "h", FAR, "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", PAST, "NX", "FIELDS", "2", "a", "b"],
        ["HPEXPIREAT", "h", "0", "FIELDS", "2", "b", "zz"],
        ["HEXPIREAT", "h", "1", "XX", "FIELDS", "1", "a"],
        ["HPEXPIRE", "h", "0", "FIELDS", "1", "c"],
        ["HSET", "g", "a", "1"],
        ["HEXPIRE", "g", "0", "GT", "FIELDS", "1", "a"],
        ["HEXPIRE", "g", "0", "LT", "FIELDS", "1", "a"],
    ],
    "missing keys and fields": [
        ["HPEXPIREAT", "nokey", FAR, "FIELDS", "2", "a", "b"],
        ["HPERSIST", "nokey", "FIELDS", "1", "a"],
        HSET3,
        ["HPEXPIREAT", "h", FAR, "FIELDS", "2", "x", "y"],
        ["HPEXPIREAT", "h", FAR, "FIELDS", "2", "a", "a"],
    ],
    "persist": [
        HSET3,
        ["HPERSIST", "h", "FIELDS", "2", "a", "zz"],
        ["HPEXPIREAT", "h", FAR, "FIELDS", "2", "a", "b"],
        ["HPERSIST", "h", "FIELDS", "4", "a", "c", "zz", "a"],
        ["hpersist", "h", "fields", "1", "b"],
    ],
    "writes of fields with times": [
        HSET3,
        ["HPEXPIREAT", "h", FAR, "FIELDS", "3", "a", "b", "c"],
        ["HINCRBY", "h", "a", "5"],
        ["HINCRBYFLOAT", "h", "b", "0.5"],
        ["HSET", "h", "c", "9", "d", "4"],
        ["HSETNX", "h", "a", "7"],
        ["HMSET", "h", "b", "1"],
        ["HPEXPIREAT", "h", FAR, "FIELDS", "2", "c", "d"],
        ["HDEL", "h", "c", "zz"],
        ["COPY", "h", "h2"],
        ["RENAME", "h2", "h3"],
        ["HDEL", "h", "a", "d"],
    ],
    "errors in Redis's order": [
        ["SET", "s", "x"],
        ["HPEXPIREAT", "s", "x", "FIELDS", "1", "a"],
        ["HPERSIST", "s", "FIELDS", "0", "a"],
        HSET3,
        ["HEXPIRE", "h", "1", "FIELDS"],
        ["HEXPIRE", "h", "1", "FIELDS", "0"],
        ["HPERSIST", "h", "FIELDS", "1"],
        ["HEXPIRE", "h", "x", "FIELDS", "1", "a"],
        ["HEXPIRE", "h", "-1", "FIELDS", "1", "a"],
        ["HEXPIRE", "h", "70368744178", "FIELDS", "1", "a"],
        ["HEXPIREAT", "h", "70368744177", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", "70368744177664", "FIELDS", "1", "a"],
        ["HPEXPIRE", "h", "70368744177663", "FIELDS", "1", "a"],
        ["HPEXPIRE", "h", "99999999999999999999", "FIELDS", "1", "a"],
        ["HEXPIRE", "h", "1", "FOO", "1", "a"],
        ["HEXPIRE", "h", "1", "NX", "1", "a", "b"],
        ["HEXPIRE", "h", "1", "NX", "XX", "FIELDS", "1", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "0", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "-1", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "x", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "2", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "1", "a", "b"],
        ["HPERSIST", "h", "FIELD", "1", "a"],
        ["HPERSIST", "h", "FIELDS", "0", "a"],
        ["HPERSIST", "h", "FIELDS", "x", "a"],
        ["HPERSIST", "h", "FIELDS", "2", "a"],
        ["HEXPIRE", "nokey", "x", "FIELDS", "1", "a"],
        ["HEXPIRE", "nokey", "1", "FIELDS", "2", "a"],
    ],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_commands_match_redis_74(server: redis.Redis, tmp_path: Path, name: str) -> None:
    run(server, tmp_path, CASES[name])


_FIELD = st.sampled_from(["a", "b", "c"])


_TIME = st.sampled_from([PAST, SOONER, FAR, LATER])


_RANDOM = st.lists(
    st.one_of(
        st.tuples(st.just("HSET"), _FIELD, st.sampled_from(["1", "x"])),
        st.tuples(st.just("HDEL"), _FIELD),
        st.tuples(st.just("HINCRBY"), _FIELD, st.just("2")),
        st.tuples(st.just("HSETNX"), _FIELD, st.just("n")),
        st.tuples(
            st.just("HPEXPIREAT"),
            _TIME,
            st.sampled_from(["", "NX", "XX", "GT", "LT"]),
            st.lists(_FIELD, min_size=1, max_size=3),
        ),
        st.tuples(st.just("HPERSIST"), st.lists(_FIELD, min_size=1, max_size=3)),
    ),
    min_size=1,
    max_size=25,
)


def _argv(step: tuple[Any, ...]) -> list[str]:
    name, *rest = step
    if name == "HPEXPIREAT":
        at, condition, fields = rest
        return [
            name,
            "h",
            at,
            *([condition] if condition else []),
            "FIELDS",
            str(len(fields)),
            *fields,
        ]
    if name == "HPERSIST":
        return [name, "h", "FIELDS", str(len(rest[0])), *rest[0]]
    return [name, "h", *rest]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_RANDOM)
def test_random_sequences_match_redis_74(
    server: redis.Redis, tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]]
) -> None:
    run(server, tmp_path_factory.mktemp("random"), [_argv(step) for step in steps])


def test_relative_times_match_redis_74(server: redis.Redis, tmp_path: Path) -> None:
    """HEXPIRE/HPEXPIRE add the command's time: both sides agree to within the time between
    the two calls."""
    server.flushall()
    with shard_writer(tmp_path / "shard") as writer:
        for argv in (
            HSET3,
            ["HEXPIRE", "h", "1000", "FIELDS", "1", "a"],
            ["HPEXPIRE", "h", "5000000", "FIELDS", "1", "b"],
        ):
            assert writer.execute(0, argv).reply == server.execute_command(*argv)
        ours = writer.keyspace.get(0, b"h")
        assert ours is not None and ours.field_expire_at_ms is not None
        theirs = redis_hash(server, b"h")[3]
        assert ours.field_expire_at_ms.keys() == theirs.keys() == {b"a", b"b"}
        for field, at in theirs.items():
            assert abs(ours.field_expire_at_ms[field] - at) < 2000
