"""Live capture over random command sequences (hypothesis): whatever Redis 7.0 propagates for the
command set of tests/support/redis/command_strategy.py (refusals, expiries in the past, SORT ...
STORE, BITOP, stream groups, FLUSHDB ...), sent before the capture starts (it arrives in the
full resync as ``r`` rows) and while it follows, with the capture stopped and restarted (PSYNC)
at a random point, leaves moonish's keyspace equal to a real Redis replica's of the same master,
in 1 or 3 shards.

The oracle is the replica, not the master: both see only what the master propagates, and Redis
does not always propagate what it did (``BITFIELD k OVERFLOW FAIL INCRBY u1 0 3`` on a missing
key creates ``k`` on the master, but changes nothing it counts as dirty, so neither its AOF nor
its replicas ever hear of it)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from tests.support.redis.capture import (
    Running,
    client_of,
    events,
    master_offset,
    our_state,
    redis_state,
    wait_for,
)
from tests.support.redis.command_strategy import COMMAND
from tests.support.servers.redis_server import redis_server

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """A master and a real Redis replica of it."""
    with redis_server(
        tmp_path_factory.mktemp("redis"),
        "--repl-diskless-sync-delay",
        "0",
        "--repl-backlog-size",
        "16mb",
    ) as master:
        port = master.connection_pool.connection_kwargs["port"]
        with redis_server(
            tmp_path_factory.mktemp("replica"), "--replicaof", "127.0.0.1", str(port)
        ) as replica:
            yield master, replica


def replica_caught_up(master: redis.Redis, replica: redis.Redis) -> None:
    target = master_offset(master)
    wait_for(
        lambda: (
            replica.info("replication").get("master_link_status") == "up"
            and int(replica.info("replication")["slave_repl_offset"]) >= target
        ),
        "the Redis replica",
    )


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
@example(  # the master keeps k0 = "\x00"; nothing is propagated (see the module docstring)
    before=[],
    live=[(b"BITFIELD", b"k0", b"OVERFLOW", b"FAIL", b"INCRBY", b"u1", b"0", b"3")],
    restart=None,
    shards=1,
)
def test_random_commands_followed_live_equal_redis(
    servers: tuple[redis.Redis, redis.Redis],
    before: list[tuple[bytes, ...]],
    live: list[tuple[bytes, ...]],
    restart: int | None,
    shards: int,
) -> None:
    master, replica = servers
    master.flushall()
    for argv in before:
        send(master, argv)
    replica_caught_up(master, replica)
    # Sent before the capture, such a command leaves the replica unlike its master (see the
    # module docstring), while the full resync carries the master's keys: no one answer.
    assume(redis_state(master, (0, 1)) == redis_state(replica, (0, 1)))
    other = client_of(replica, 1)
    loaded = int(replica.dbsize()) + int(other.dbsize())
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
            replica_caught_up(master, replica)
            expected = redis_state(replica, (0, 1))  # MOVE, SWAPDB
            report = running.finish()
        finally:
            running.__exit__()
        assert our_state(data) == expected
        restarted = restart is not None and restart < len(live)
        assert (report.full_resyncs, report.continues) == ((0, 1) if restarted else (1, 0))
        assert sum(event["op"] == "r" for event in events(data)) == loaded  # a row per key
