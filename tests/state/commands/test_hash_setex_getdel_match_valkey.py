"""HSETEX (every option), HGETDEL and HGETEX against a real Valkey 9.1.2: replies, errors and
their order, values, field times and c/u/d, in fixed cases, random sequences and with relative
times."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.redis.hash_ttls import FAR, FAR_S, LATER, PAST, SOONER, redis_hash, run
from tests.support.servers.redis_server import shard_writer
from tests.support.servers.valkey_server import valkey_server

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with valkey_server(tmp_path_factory.mktemp("valkey")) as client:
        yield client


HSET3 = ["HSET", "h", "a", "1", "b", "2", "c", "3"]


CASES: dict[str, list[list[str]]] = {
    "hsetex sets values and times": [
        ["HSETEX", "h", "FIELDS", "2", "a", "1", "b", "2"],
        ["HSETEX", "h", "PXAT", FAR, "FIELDS", "2", "a", "10", "c", "3"],
        ["HSETEX", "h", "EXAT", FAR_S, "FIELDS", "1", "d", "4"],
        ["HSETEX", "h", "KEEPTTL", "FIELDS", "2", "a", "11", "b", "12"],
        ["HSETEX", "h", "FIELDS", "1", "c", "13"],
        ["hsetex", "h", "pxat", LATER, "fields", "2", "b", "x", "b", "y"],
        ["HSETEX", "h", "keepttl", "KEEPTTL", "FIELDS", "1", "b", "z"],
        ["HSETEX", "h", "PXAT", SOONER, "PXAT", FAR, "FIELDS", "1", "e", "5"],
        ["HSETEX", "g", "PXAT", "9223372036854775807", "FIELDS", "1", "a", "1"],
        ["HSETEX", "g", "EXAT", "9223372036854775", "FIELDS", "1", "b", "1"],
        ["HSETEX", "h", "FIELDS", "1", "FIELDS", "f"],
    ],
    "hsetex conditions on the key and on the fields": [
        ["HSETEX", "h", "XX", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "FXX", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "NX", "FNX", "PXAT", FAR, "FIELDS", "2", "a", "1", "b", "2"],
        ["HSETEX", "h", "NX", "FIELDS", "1", "a", "9"],
        ["HSETEX", "h", "XX", "FIELDS", "1", "a", "9"],
        ["HSETEX", "h", "FNX", "FIELDS", "2", "c", "3", "a", "9"],
        ["HSETEX", "h", "FNX", "FIELDS", "2", "c", "3", "d", "4"],
        ["HSETEX", "h", "FXX", "KEEPTTL", "FIELDS", "2", "a", "5", "zz", "1"],
        ["HSETEX", "h", "FXX", "KEEPTTL", "FIELDS", "2", "a", "5", "b", "6"],
        ["HSETEX", "h", "xx", "fxx", "PXAT", LATER, "FIELDS", "1", "c", "7"],
        ["HSETEX", "h", "FNX", "FNX", "FIELDS", "1", "a", "1"],
        ["HSETEX", "nokey", "FXX", "FIELDS", "1", "a", "1"],
        ["HSETEX", "nokey", "XX", "PXAT", "-1", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "NX", "PXAT", "-1", "FIELDS", "1", "a", "1"],
    ],
    "hsetex with a past time deletes the fields that exist": [
        HSET3,
        ["HSETEX", "h", "PXAT", FAR, "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "PXAT", PAST, "FIELDS", "2", "a", "9", "zz", "9"],
        ["HSETEX", "h", "PXAT", PAST, "FIELDS", "1", "zz", "9"],
        ["HSETEX", "h", "FXX", "EXAT", "0", "FIELDS", "1", "b", "9"],
        ["HSETEX", "h", "EX", "0", "FIELDS", "2", "c", "9", "c", "8"],
        ["HSETEX", "nokey", "PX", "0", "FIELDS", "1", "a", "1"],
    ],
    "hgetdel": [
        ["HGETDEL", "h", "FIELDS", "1", "a"],
        HSET3,
        ["HSETEX", "h", "PXAT", FAR, "FIELDS", "1", "a", "1"],
        ["HGETDEL", "h", "FIELDS", "3", "a", "zz", "a"],
        ["hgetdel", "h", "fields", "1", "zz"],
        ["HGETDEL", "h", "FIELDS", "2", "b", "c"],
    ],
    "hgetex": [
        ["HGETEX", "h", "PXAT", FAR, "FIELDS", "1", "a"],
        HSET3,
        ["HGETEX", "h", "FIELDS", "2", "a", "zz"],
        ["HGETEX", "h", "PXAT", FAR, "FIELDS", "3", "a", "zz", "a"],
        ["HGETEX", "h", "EXAT", FAR_S, "FIELDS", "1", "b"],
        ["HGETEX", "h", "PERSIST", "FIELDS", "3", "a", "c", "zz"],
        ["hgetex", "h", "persist", "persist", "fields", "1", "b"],
        ["HGETEX", "h", "PXAT", PAST, "FIELDS", "3", "a", "zz", "a"],
        ["HGETEX", "h", "EX", "0", "FIELDS", "2", "b", "c"],
    ],
    "errors in Valkey's order": [
        ["SET", "s", "x"],
        HSET3,
        ["HSETEX", "h", "a", "1"],
        ["HSETEX", "h", "FIELDS", "1", "a"],
        ["HSETEX", "h", "EX", "100", "a", "b"],
        ["HSETEX", "h", "BOGUS", "a", "b", "c"],
        ["HSETEX", "s", "BOGUS", "FIELDS", "2", "a", "1"],
        ["HSETEX", "s", "FIELDS", "x", "a", "1"],
        ["HSETEX", "s", "FIELDS", "2", "a", "1"],
        ["HSETEX", "s", "FIELDS", "-1", "a", "1"],
        ["HSETEX", "s", "EX", "x", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "FIELDS", "1", "a", "1", "x"],
        ["HSETEX", "h", "FIELDS", "4611686018427387904", "a", "1"],
        ["HSETEX", "h", "NX", "XX", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "FNX", "FXX", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "EX", "1", "PX", "1", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "EX", "1", "KEEPTTL", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "PERSIST", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "GET", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "EX", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "EX", "NX", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "EX", "-1", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "EX", "1.5", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "FXX", "EX", "-1", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "EX", "9223372036854775", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "EXAT", "9223372036854776", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "PX", "9223372036854775807", "FIELDS", "1", "a", "1"],
        ["HSETEX", "h", "FIELDS", "01", "a", "1"],
        ["HGETDEL", "h", "FIELDS", "1"],
        ["HGETDEL", "s", "BOGUS", "1", "a"],
        ["HGETDEL", "h", "BOGUS", "x", "a"],
        ["HGETDEL", "s", "FIELDS", "x", "a"],
        ["HGETDEL", "s", "FIELDS", "0", "a"],
        ["HGETDEL", "s", "FIELDS", "2", "a"],
        ["HGETDEL", "s", "FIELDS", "1", "a"],
        ["HGETEX", "h", "EX", "100"],
        ["HGETEX", "h", "EX", "10", "a", "b"],
        ["HGETEX", "s", "BOGUS", "FIELDS", "1", "a"],
        ["HGETEX", "h", "a", "FIELDS", "1", "a"],
        ["HGETEX", "h", "NX", "EX", "100", "FIELDS", "1", "a"],
        ["HGETEX", "h", "KEEPTTL", "FIELDS", "1", "a"],
        ["HGETEX", "h", "EX", "100", "PERSIST", "FIELDS", "1", "a"],
        ["HGETEX", "h", "FIELDS", "0", "a"],
        ["HGETEX", "h", "FIELDS", "2", "a"],
        ["HGETEX", "h", "EX", "x", "FIELDS", "0", "a"],
        ["HGETEX", "s", "EX", "x", "FIELDS", "1", "a"],
        ["HGETEX", "s", "EX", "-1", "FIELDS", "1", "a"],
        ["HGETEX", "h", "EX", "x", "FIELDS", "1", "a"],
        ["HGETEX", "h", "EX", "-1", "FIELDS", "1", "a"],
    ],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_commands_match_valkey(server: redis.Redis, tmp_path: Path, name: str) -> None:
    run(server, tmp_path, CASES[name])


_FIELD = st.sampled_from(["a", "b", "c"])


_TIME = st.sampled_from(["", "KEEPTTL", f"PXAT {PAST}", f"PXAT {SOONER}", f"PXAT {FAR}"])


_RANDOM = st.lists(
    st.one_of(
        st.tuples(st.just("HSET"), _FIELD, st.sampled_from(["1", "x"])),
        st.tuples(st.just("HDEL"), _FIELD),
        st.tuples(st.just("HPEXPIREAT"), st.sampled_from([FAR, LATER]), _FIELD),
        st.tuples(
            st.just("HSETEX"),
            st.sampled_from(["", "NX", "XX"]),
            st.sampled_from(["", "FNX", "FXX"]),
            _TIME,
            st.lists(_FIELD, min_size=1, max_size=3),
        ),
        st.tuples(st.just("HGETDEL"), st.lists(_FIELD, min_size=1, max_size=3)),
        st.tuples(
            st.just("HGETEX"),
            st.sampled_from(["", "PERSIST", f"PXAT {PAST}", f"PXAT {LATER}"]),
            st.lists(_FIELD, min_size=1, max_size=3),
        ),
    ),
    min_size=1,
    max_size=25,
)


def _argv(step: tuple[Any, ...]) -> list[str]:
    name, *rest = step
    if name == "HSETEX":
        key_cond, field_cond, time, fields = rest
        options = [*key_cond.split(), *field_cond.split(), *time.split()]
        pairs = [x for field in fields for x in (field, field + "v")]
        return [name, "h", *options, "FIELDS", str(len(fields)), *pairs]
    if name == "HGETEX":
        option, fields = rest
        return [name, "h", *option.split(), "FIELDS", str(len(fields)), *fields]
    if name == "HGETDEL":
        return [name, "h", "FIELDS", str(len(rest[0])), *rest[0]]
    if name == "HPEXPIREAT":
        return [name, "h", rest[0], "FIELDS", "1", rest[1]]
    return [name, "h", *rest]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_RANDOM)
def test_random_sequences_match_valkey(
    server: redis.Redis, tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]]
) -> None:
    run(server, tmp_path_factory.mktemp("random"), [_argv(step) for step in steps])


def test_relative_times_match_valkey(server: redis.Redis, tmp_path: Path) -> None:
    """HSETEX's and HGETEX's EX and PX add the command's time: both sides agree to within the
    time between the two calls."""
    server.flushall()
    with shard_writer(tmp_path / "shard") as writer:
        for argv in (
            HSET3,
            ["HSETEX", "h", "EX", "1000", "FIELDS", "1", "a", "9"],
            ["HSETEX", "h", "FXX", "PX", "5000000", "FIELDS", "1", "b", "8"],
            ["HGETEX", "h", "EX", "2000", "FIELDS", "1", "c"],
            ["HSETEX", "h", "PX", "3000000", "FIELDS", "1", "d", "7"],
        ):
            assert writer.execute(0, argv).reply == server.execute_command(*argv)
        ours = writer.keyspace.get(0, b"h")
        assert ours is not None and ours.field_expire_at_ms is not None
        theirs = redis_hash(server, b"h")[3]
        assert ours.field_expire_at_ms.keys() == theirs.keys() == {b"a", b"b", b"c", b"d"}
        for field, at in theirs.items():
            assert abs(ours.field_expire_at_ms[field] - at) < 2000
