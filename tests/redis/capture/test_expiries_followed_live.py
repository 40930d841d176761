"""Keys that expire on a real redis-server 7.0, followed by a live capture: the master's ``DEL``
(``UNLINK`` with ``lazyfree-lazy-expire yes``) of a key it expired is a ``d`` marked
``expired``, unlike a user's delete; a key that expired while the master reloaded (``DEBUG
RELOAD`` sends the replica nothing for it) is expired by the capture's sweep of overdue keys."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.redis.capture import FAST, Running, events, our_state
from tests.support.servers.redis_server import redis_server


def deletes(data_dir: Path) -> dict[str, dict[str, Any]]:
    return {e["before"]["key"]: e["source"] for e in events(data_dir) if e["op"] == "d"}


@pytest.mark.redis
@pytest.mark.parametrize(("lazyfree", "command"), [("no", "DEL"), ("yes", "UNLINK")])
def test_a_key_the_master_expires_is_a_delete_marked_expired(
    tmp_path: Path, workdir: Path, lazyfree: str, command: str
) -> None:
    with (
        redis_server(workdir, "--lazyfree-lazy-expire", lazyfree) as client,
        Running(client, tmp_path / "data", 2) as running,
    ):
        running.caught_up(client)
        client.set("short-lived", "v", px=100)
        client.set("deleted", "v", px=60_000)
        time.sleep(0.3)
        assert client.get("short-lived") is None  # expired on access: Redis propagates it
        client.delete("deleted")
        running.caught_up(client)
        running.finish()
    seen = deletes(tmp_path / "data")
    assert seen["short-lived"]["expired"] is True
    assert seen["short-lived"]["command"] == command
    assert seen["deleted"]["expired"] is False


@pytest.mark.redis
def test_a_key_that_expired_during_debug_reload_is_expired_by_the_capture(
    tmp_path: Path, workdir: Path
) -> None:
    options = dataclasses.replace(FAST, overdue_expiry_ms=200)
    with (
        redis_server(workdir, "--enable-debug-command", "yes") as client,
        Running(client, tmp_path / "data", 2, options=options) as running,
    ):
        client.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")  # no DEL before the reload
        running.caught_up(client)
        client.set("reloaded-away", "v", px=100)
        client.set("stays", "v")
        running.caught_up(client)
        time.sleep(0.2)
        client.execute_command("DEBUG", "RELOAD")  # drops the key, tells replicas nothing
        assert client.keys() == [b"stays"]
        deadline = time.monotonic() + 10
        while "reloaded-away" not in deletes(tmp_path / "data"):
            assert time.monotonic() < deadline, "the capture kept a key past its time"
            time.sleep(0.05)
        running.finish()
    gone = deletes(tmp_path / "data")["reloaded-away"]
    assert gone["expired"] is True and gone["command"] == "DEL"
    assert set(our_state(tmp_path / "data")) == {(0, b"stays")}
