"""``moonish consumer``: create, ack, list (the lag table, text and JSON), show, seek and drop,
with exit codes by kind."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from moonish.datadir import consumers
from tests.support.cli import cli
from tests.support.datadirs import data_dir


def test_consumer_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = data_dir(tmp_path)
    assert cli("consumer", "create", str(root), "a", "--from", "earliest") == 0
    assert orjson.loads(capsys.readouterr().out)["token"] == "m2.a0.a0"
    assert cli("consumer", "create", str(root), "b") == 0  # default: now
    assert orjson.loads(capsys.readouterr().out)["token"] == "m2.c100.c100"
    assert cli("consumer", "create", str(root), "b") == 2
    assert "exists" in capsys.readouterr().err
    assert cli("consumer", "ack", str(root), "a", "m2.b10.b20") == 0
    assert orjson.loads(capsys.readouterr().out) == {"name": "a", "token": "m2.b10.b20"}
    assert cli("consumer", "ack", str(root), "a", "m1.b10") == 2
    capsys.readouterr()
    assert cli("consumer", "list", str(root)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "CONSUMER",
        "SHARD",
        "CONFIRMED",
        "LATEST",
        "LAG",
        "LAG-BYTES",
        "OLDEST-AGE",
        "STATUS",
    ]
    assert lines[1].split()[:5] == ["a", "0", "10", "100", "90"]
    assert len(lines) == 5
    assert cli("consumer", "list", str(root), "--json") == 0
    listed = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [entry["name"] for entry in listed] == ["a", "b"]
    assert cli("consumer", "show", str(root), "a", "--json") == 0
    assert orjson.loads(capsys.readouterr().out)["lag_records"] == 90 + 80
    consumers.mark_lost(root, "a", "a test said so")
    assert cli("consumer", "ack", str(root), "a", "now") == 3
    assert "a test said so" in capsys.readouterr().err
    assert cli("consumer", "seek", str(root), "a", "earliest") == 0
    assert orjson.loads(capsys.readouterr().out)["token"] == "m2.a0.a0"
    assert cli("consumer", "drop", str(root), "a") == 0
    assert cli("consumer", "show", str(root), "a") == 2
    assert "no consumer named 'a'" in capsys.readouterr().err


def test_lag_table_text_shows_lost_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = data_dir(tmp_path, shards=1)
    consumers.create(root, "x", (1,))
    consumers.mark_lost(root, "x", "too far behind")
    assert cli("consumer", "list", str(root)) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("lost: too far behind")
