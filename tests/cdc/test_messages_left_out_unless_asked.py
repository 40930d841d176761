"""Checkpoints and message records (``op: "m"``, no ``before``/``after``) stay out of the
change stream unless a reader asks for them (``messages=True``, ``--messages``), as Debezium
keeps messages off its data topics: shard reads and tails, merged reads and tails, exports,
the server's feeds. Positions still move past what is left out, and an atomic batch keeps its
BEGIN and END when its message is left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import moonish
from moonish.cdc import merged_read, shard_read
from moonish.clock import FixedClock
from moonish.log.records import Message
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.serve import ServeOptions
from moonish.sinks.export import Exporter, ExportOptions
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.servers.serve_util import Running, request
from tests.support.wal import START_US


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """Two shards: in shard-0 a SET, a checkpoint, a SET and a checkpoint last; in shard-1 a
    SET with a message in its atomic batch."""
    clock = FixedClock(START_US, 1000)
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    with ShardWriter(tmp_path / "data" / "shard-0", options, clock) as writer:
        writer.execute(0, ["SET", "a", "1"])
        writer.checkpoint()
        writer.execute(0, ["SET", "b", "2"])
        writer.checkpoint()
    options = ShardOptions(WriterOptions(shard_id=1, fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    with ShardWriter(tmp_path / "data" / "shard-1", options, clock) as writer, writer._lock:
        prepared = writer.prepare(0, [b"SET", b"c", b"3"], clock.now_us())
        writer.append([*prepared.records, Message("moonish.test", b"x", 0)], True, START_US)
    return tmp_path / "data"


def ops(envelopes: list[bytes]) -> list[str]:
    return [orjson.loads(line).get("op") or orjson.loads(line)["status"] for line in envelopes]


def test_shard_reads_and_tails_leave_messages_out_and_move_past_them(data: Path) -> None:
    shard = data / "shard-0"
    result = shard_read.read(shard, 0)
    assert ops(result.events.envelopes) == ["c", "c"]
    assert result.cursor.lsn == 5  # past the last checkpoint (LSN 4)
    with shard_read.tail(shard, 0) as stream:
        assert [event.op for event in stream] == ["c", "c"]
        assert stream.cursor.lsn == 5
    asked = shard_read.read(shard, 0, messages=True).events.envelopes
    assert ops(asked) == ["c", "m", "c", "m"]
    with shard_read.tail(shard, 0, messages=True) as stream:
        assert [event.op for event in stream] == ["c", "m", "c", "m"]


def test_merged_reads_and_tails_leave_messages_out_and_move_past_them(data: Path) -> None:
    result = merged_read.read_merged(data, "earliest")
    assert sorted(ops(result.events.envelopes)) == ["c", "c", "c"]
    assert result.token.positions == (4, 2)
    with merged_read.MergedTail(data) as stream:
        assert sorted(getattr(event, "op", "") for event in stream) == ["c", "c", "c"]
        assert stream.token.positions == (4, 2)
    asked = moonish.read(data, "earliest", messages=True).events.envelopes
    assert sorted(ops(asked)) == ["c", "c", "c", "m", "m", "m"]


def test_a_batch_keeps_its_begin_and_end_when_its_message_is_left_out(data: Path) -> None:
    shard = data / "shard-1"
    assert ops(shard_read.read(shard, 0, transactions=True).events.envelopes) == [
        "BEGIN",
        "c",
        "END",
    ]
    asked = shard_read.read(shard, 0, transactions=True, messages=True).events.envelopes
    assert ops(asked) == ["BEGIN", "c", "m", "END"]


def test_an_export_leaves_messages_out_unless_asked(data: Path, tmp_path: Path) -> None:
    def exported(out: Path, options: ExportOptions) -> tuple[list[str], dict[int, int]]:
        with Exporter(data, out, options) as exporter:
            exporter.run()
            cursors = exporter.cursors
        lines = [
            line for file in sorted(out.glob("*.ndjson")) for line in file.read_bytes().splitlines()
        ]
        return ops(lines), cursors

    got, cursors = exported(tmp_path / "plain", ExportOptions(consumer=None))
    assert sorted(got) == ["c", "c", "c"] and cursors == {0: 5, 1: 3}
    got, _ = exported(tmp_path / "asked", ExportOptions(consumer=None, messages=True))
    assert sorted(got) == ["c", "c", "c", "m", "m", "m"]


@pytest.mark.parametrize("messages", [False, True])
def test_the_servers_feeds_leave_messages_out_unless_it_serves_them(
    data: Path, messages: bool
) -> None:
    with Running(data, ServeOptions(port=0, messages=messages)) as server:
        status, page = request(f"{server.url}/v1/changes?since=earliest")
    assert status == 200
    got: list[Any] = sorted(row["change"]["op"] for row in page["results"])
    assert got == ["c", "c", "c", *(["m", "m", "m"] if messages else [])]
    assert page["last_seq"] == str(moonish.read(data, "earliest").token)
