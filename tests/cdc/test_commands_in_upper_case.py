"""``source.command`` has one form, upper case, whatever case the client sent the command in
(redis-cli sends ``set``; the writer logs the command as received), from the C encoder and
from its Python twin alike, for logs written before and after."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import moonish
from moonish.cdc import envelope
from moonish.clock import FixedClock
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.wal import START_US


@pytest.mark.parametrize("encoder", ["c", "python"])
def test_source_command_is_upper_case_whatever_the_clients_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoder: str
) -> None:
    if encoder == "c" and envelope._ENCODE_CHANGES is None:
        pytest.skip("a pure build has no C extension")
    if encoder == "python":
        monkeypatch.setattr(envelope, "_ENCODE_CHANGES", None)
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    with ShardWriter(tmp_path, options, FixedClock(START_US, 1000)) as writer:
        writer.execute(0, ["set", "k", "v"])
        writer.execute(0, ["hSet", "h", "f", "v"])
        writer.transaction([(0, ["incr", "n"]), (0, ["Del", "k"])])
    read = moonish.read(tmp_path, 0, 100).events.envelopes
    commands = [orjson.loads(line)["source"]["command"] for line in read]
    assert commands == ["SET", "HSET", "INCR", "DEL"]
