"""A ``d`` record is marked ``expired`` whenever the key's expiry time had passed at the
command's time: a live capture's writer (loading semantics, no expiry of its own) takes the
master's ``DEL`` or ``UNLINK`` of a key it expired as that expiry, as the writer's own lazy
expiry is in live semantics. A delete before the key's time is a user's delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import moonish
from moonish.clock import FixedClock
from moonish.errors import CommandError
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.wal import START_US

START_MS = START_US // 1000


def writer_at(path: Path, clock: FixedClock) -> ShardWriter:
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    writer = ShardWriter(path, options, clock)
    writer.live_source = True  # as a live capture's (moonish.redis.capture.apply)
    return writer


def loaded(writer: ShardWriter, clock: FixedClock, *argv: str) -> None:
    """``argv`` applied as a replica applies the master's stream (no expiry of its own)."""
    now_us = clock.now_us()
    with writer._lock:
        prepared = writer.prepare(0, [arg.encode() for arg in argv], now_us, loading=True)
        assert not isinstance(prepared.reply, CommandError), prepared.reply
        writer.append(prepared.expired, False, now_us)
        writer.append(prepared.records, len(prepared.records) > 1, now_us)


def envelopes(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(e) for e in moonish.read(path, 0, 1000).events.envelopes]


@pytest.mark.parametrize("command", ["DEL", "UNLINK"])
def test_the_masters_delete_of_a_lapsed_key_is_an_expiry(tmp_path: Path, command: str) -> None:
    clock = FixedClock(START_US)
    with writer_at(tmp_path, clock) as writer:
        loaded(writer, clock, "SET", "lapsed", "v", "PX", "100")
        loaded(writer, clock, "SET", "kept", "v", "PX", "100000")
        loaded(writer, clock, "SET", "plain", "v")
        clock.advance(100_000)  # "lapsed"'s time is exactly now: expired (Redis: <= now)
        loaded(writer, clock, command, "lapsed", "kept", "plain")
    deletes = [e for e in envelopes(tmp_path) if e["op"] == "d"]
    marks = {e["before"]["key"]: e["source"]["expired"] for e in deletes}
    assert marks == {"lapsed": True, "kept": False, "plain": False}
    assert {e["source"]["command"] for e in deletes} == {command}
    lapsed = next(e for e in deletes if e["before"]["key"] == "lapsed")
    assert lapsed["before"]["expire_at_ms"] <= lapsed["source"]["ts_ms"]
