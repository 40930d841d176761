"""Reading as a named consumer: `cdc read/tail --consumer [--ack]`, at-least-once delivery,
forward-only acks, and a lost consumer that fails every read until it is reset."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import moonish
from cli.main import main
from moonish.clock import FixedClock
from moonish.datadir import consumers
from moonish.errors import ConsumerLostError, ConsumerNotFoundError
from tests.support.steps import write_steps
from tests.support.wal import START_US, kv, writer_at


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_steps(tmp_path / "data", 2, [(n % 2, 1, 1) for n in range(10)])
    return tmp_path / "data"


def lsns(lines: list[str]) -> list[tuple[int, int]]:
    return [(orjson.loads(x)["source"]["shard"], orjson.loads(x)["source"]["lsn"]) for x in lines]


def test_without_ack_a_consumer_gets_the_same_changes_again(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    consumers.create(data, "billing", (0, 0))
    assert main(["cdc", "read", str(data), "--consumer", "billing", "--limit", "3"]) == 0
    first = capsys.readouterr().out.splitlines()
    assert main(["cdc", "read", str(data), "--consumer", "billing", "--limit", "3"]) == 0
    again = capsys.readouterr().out.splitlines()
    assert lsns(first[1:]) == lsns(again[1:])  # at-least-once: nothing was confirmed
    assert first[0] == again[0] == "m2.a2.a1"
    assert consumers.load(data, "billing").positions == (0, 0)


def test_ack_confirms_what_was_printed_and_the_next_read_continues(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    consumers.create(data, "billing", (0, 0))
    seen: list[tuple[int, int]] = []
    for _ in range(5):
        assert (
            main(["cdc", "read", str(data), "--consumer", "billing", "--ack", "--limit", "3"]) == 0
        )
        seen += lsns(capsys.readouterr().out.splitlines()[1:])
    assert sorted(seen) == [(k, lsn) for k in (0, 1) for lsn in range(1, 6)]
    assert len(seen) == len(set(seen)) == 10
    assert consumers.load(data, "billing").positions == (5, 5)
    assert main(["cdc", "tail", str(data), "--consumer", "billing"]) == 0
    assert capsys.readouterr().out == ""  # nothing after the confirmed position


def test_an_ack_never_moves_a_position_back_and_seek_does(data: Path) -> None:
    consumers.create(data, "c", (0, 0))
    moonish.ack(data, "c", "m2.a4.a3")
    moonish.ack(data, "c", "m2.a1.a5")  # older in shard 0: that component stays
    assert consumers.load(data, "c").positions == (4, 5)
    assert main(["consumer", "seek", str(data), "c", "earliest"]) == 0
    assert consumers.load(data, "c").positions == (0, 0)


def test_tail_with_ack_confirms_each_printed_batch(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    consumers.create(data, "t", (0, 0))
    assert main(["cdc", "tail", str(data), "--consumer", "t", "--ack"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 10
    assert consumers.load(data, "t").positions == (5, 5)


def test_a_lost_consumer_fails_every_read_until_it_is_reset(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    consumers.create(data, "slow", (2, 0))
    consumers.mark_lost(data, "slow", "max_pinned_bytes 1000 exceeded", shard=0)
    for _ in range(2):
        with pytest.raises(ConsumerLostError) as info:
            moonish.read(data, consumer="slow")
        assert info.value.consumer == "slow" and info.value.status == "lost"
        assert "max_pinned_bytes" in str(info.value) and info.value.oldest_token == "m2.a0.a0"
        assert main(["cdc", "read", str(data), "--consumer", "slow"]) == 3
        assert "slow" in capsys.readouterr().err
    assert main(["consumer", "seek", str(data), "slow", "m2.a2.a0"]) == 0
    assert len(moonish.read(data, consumer="slow").events) == 8


def test_a_consumer_whose_changes_are_gone_is_named_in_the_error(data: Path) -> None:
    consumers.create(data, "late", (0, 0))
    segments = sorted((data / "shard-1").glob("*.seg"))
    for path in segments:  # every record of shard 1 removed by hand, past the consumer
        path.unlink()
    with pytest.raises(ConsumerLostError) as info:
        moonish.read(data, consumer="late")
    assert info.value.consumer == "late" and info.value.shard == 1
    assert info.value.gone == 5


def test_unknown_consumer_and_bad_flags_are_usage_errors(data: Path) -> None:
    with pytest.raises(ConsumerNotFoundError):
        moonish.read(data, consumer="nobody")
    assert main(["cdc", "read", str(data), "--consumer", "nobody"]) == 2
    assert main(["cdc", "read", str(data), "earliest", "--ack"]) == 2
    assert main(["cdc", "tail", str(data), "--from-lsn", "3", "--consumer", "x"]) == 2


def test_an_export_is_a_named_consumer_moved_with_its_files(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["cdc", "export", str(data), str(out), "--max-records-per-file", "2"]) == 0
    registered = consumers.load(data, "export-out")
    assert registered.owner == "export" and registered.positions == (5, 5)
    write_steps(data, 2, [(0, 1, 1)])  # one more change: the consumer lags until exported
    assert consumers.load(data, "export-out").positions == (5, 5)
    assert main(["cdc", "export", str(data), str(out)]) == 0
    assert consumers.load(data, "export-out").positions == (6, 5)
    assert main(["cdc", "export", str(data), str(tmp_path / "b"), "--no-consumer"]) == 0
    assert [c.name for c in consumers.list_consumers(data)] == ["export-out"]
    consumers.mark_lost(data, "export-out", "max_pinned_bytes 1 exceeded", shard=0)
    capsys.readouterr()
    assert main(["cdc", "export", str(data), str(out)]) == 3  # loud until reset
    assert "export-out" in capsys.readouterr().err


# -- a consumer created on a shard directory ---------------------------------------------------
def test_a_consumer_created_on_a_shard_directory_is_read_from_it(tmp_path: Path) -> None:
    """consumers.create/ack/lag treat a shard directory as a data directory of one shard whose
    consumers live in ``<shard>/consumers`` (docs and moonish.datadir.consumers); reads find
    the consumer there too, not in the parent directory (where mapping ``.../shard-0`` to its
    parent would fail with ConsumerNotFoundError or read another consumer of the name)."""
    shard = tmp_path / "shard-0"
    with writer_at(shard, 0, FixedClock(START_US, 1)) as writer:
        writer.append(kv(b"a"))
        writer.append(kv(b"b"))
    consumers.create(shard, "billing", (0,))
    result = moonish.read(shard, consumer="billing")
    assert [event.lsn for event in result.events] == [1, 2]
    assert main(["cdc", "read", str(shard), "--consumer", "billing", "--ack"]) == 0
    assert consumers.load(shard, "billing").positions == (2,)
