"""A live capture of a real redis-server 7.0 names every change's command in upper case,
whatever case the client used (Redis propagates a command as the client spelled it:
redis-cli's ``set``), and the rows of its first full resync say ``"PSYNC"``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.redis.capture import Running, events
from tests.support.servers.redis_server import redis_server


@pytest.mark.redis
def test_live_commands_are_named_in_upper_case(tmp_path: Path, workdir: Path) -> None:
    with redis_server(workdir) as client:
        client.set("before", "v")
        with Running(client, tmp_path / "data", 2) as running:
            running.caught_up(client)
            client.execute_command("set", "a", "1")
            client.execute_command("hSet", "h", "f", "v")
            with client.pipeline(transaction=True) as pipe:
                pipe.execute_command("incr", "n").execute_command("del", "a")
                pipe.execute()
            running.caught_up(client)
            running.finish()
    commands = {e["op"]: set() for e in events(tmp_path / "data")}
    for event in events(tmp_path / "data"):
        commands[event["op"]].add(event["source"]["command"])
    assert commands == {"r": {"PSYNC"}, "c": {"SET", "HSET", "INCR"}, "d": {"DEL"}}
