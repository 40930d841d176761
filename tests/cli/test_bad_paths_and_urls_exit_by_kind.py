"""Arguments the file system or a URL parser refuses are the caller's error (exit 2, one line),
not a traceback (exit 1): a URL that does not parse, an output directory whose name is longer
than the file system takes; an export directory whose state file is JSON of another shape is
refused by its kind."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from moonish.sinks.export import STATE_NAME
from tests.support.cli import cli
from tests.support.paths import ROOT
from tests.support.wal import kv, open_writer

LONG_NAME = "d" * 256  # one byte over what ext4, XFS and btrfs take


@pytest.fixture
def filled(shard: Path) -> Path:
    with open_writer(shard) as writer:
        for i in range(3):
            writer.append(kv(b"key-%d" % i))
    return shard


@pytest.mark.parametrize(
    "command", [["cdc", "info", "{}"], ["cdc", "read", "{}", "0"], ["consumer", "list", "{}"]]
)
def test_a_url_that_does_not_parse_exits_2(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(*(arg.format("http://[::1") for arg in command)) == 2
    err = capsys.readouterr().err
    assert "Invalid IPv6 URL" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["wal", "import-aof", str(ROOT / "fixtures/redis-aof/mixed/appendonlydir"), "{}"],
        ["wal", "import-rdb", str(ROOT / "README.md"), "{}"],
        ["cdc", "export", "{shard}", "{}"],
    ],
)
def test_an_output_directory_name_over_255_bytes_exits_2_and_creates_nothing(
    tmp_path: Path, filled: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out" / LONG_NAME
    args = [arg.format(out, shard=filled) for arg in command]
    shards = ["--shards", "2"] if command[1].startswith("import") else []
    assert cli(*args, *shards) == 2
    err = capsys.readouterr().err
    assert "256 bytes" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("state", "code"),
    [
        ([1, 2], 5),  # not an export state at all: another format
        ("moonish-export", 5),
        ({"format": "moonish-export", "version": 2, "shards": []}, 4),  # ours, broken fields
        ({"format": "moonish-export", "version": 2, "shards": {}, "source": "here"}, 4),
    ],
)
def test_an_export_state_of_another_shape_is_refused_by_kind(
    tmp_path: Path, filled: Path, state: object, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "export"
    out.mkdir()
    (out / STATE_NAME).write_bytes(orjson.dumps(state))
    assert cli("cdc", "export", str(filled), str(out), "--no-consumer") == code
    assert STATE_NAME in capsys.readouterr().err
