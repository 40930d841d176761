"""Live capture over random command sequences (hypothesis): whatever Redis 7.0 propagates for
tests/test_state_redis.py's command set (refusals, expiries in the past, SORT ... STORE, BITOP,
stream groups, FLUSHDB ...), sent before the capture starts (it arrives in the full resync as
``r`` rows) and while it follows, with the capture stopped and restarted (PSYNC) at a random
point, leaves moonish's keyspace equal to Redis's, in 1 or 3 shards."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.redis_server import redis_server
from tests.test_capture import Running, client_of, events, our_state, redis_state
from tests.test_state_redis import COMMAND


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis"), "--repl-diskless-sync-delay", "0",
                      "--repl-backlog-size", "16mb") as client:  # fmt: skip
        yield client


def send(client: redis.Redis, argv: tuple[bytes, ...]) -> None:
    with contextlib.suppress(redis.ResponseError):  # refused: not propagated either
        client.execute_command(*argv)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.lists(COMMAND, max_size=25),
    live=st.lists(COMMAND, min_size=1, max_size=100),
    restart=st.none() | st.integers(0, 99),
    shards=st.sampled_from([1, 3]),
)
def test_random_commands_followed_live_equal_redis(
    master: redis.Redis,
    before: list[tuple[bytes, ...]],
    live: list[tuple[bytes, ...]],
    restart: int | None,
    shards: int,
) -> None:
    master.flushall()
    for argv in before:
        send(master, argv)
    other = client_of(master, 1)
    loaded = int(master.dbsize()) + int(other.dbsize())
    other.close()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        running = Running(master, data, shards)
        try:
            running.caught_up(master)  # past the full resync: the rest arrives as commands
            for index, argv in enumerate(live):
                if index == restart:  # stopped mid-stream: the next start continues (PSYNC)
                    running.finish()
                    running = Running(master, data, shards)
                send(master, argv)
            running.caught_up(master)
            expected = redis_state(master, (0, 1))  # MOVE, SWAPDB
            report = running.finish()
        finally:
            running.__exit__()
        assert our_state(data) == expected
        restarted = restart is not None and restart < len(live)
        assert (report.full_resyncs, report.continues) == ((0, 1) if restarted else (1, 0))
        assert sum(event["op"] == "r" for event in events(data)) == loaded  # a row per key
