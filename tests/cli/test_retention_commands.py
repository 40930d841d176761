"""``moonish wal retention`` and ``moonish wal prune``: a policy shown, set, merged and cleared;
the writer lock and the stream configuration it needs; what a prune deletes and why, dry runs,
``--before`` and ``--force``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from cli.main import main
from moonish.datadir import consumers
from moonish.datadir.policy import RetentionPolicy
from moonish.errors import (
    InvalidArgumentError,
    WriterLockedError,
)
from moonish.log.segment import list_segments
from moonish.log.writer import WriterOptions
from moonish.state.config import load_config, store_retention
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.datadirs import fill, keyspace_shard
from tests.support.retention import log_files


def test_wal_retention_shows_sets_and_clears(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    for k in range(2):
        keyspace_shard(root / f"shard-{k}", 20)
    assert main(["wal", "retention", str(root)]) == 0
    shown = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["retention"]["max_bytes"] for line in shown] == [None, None]
    assert main(["wal", "retention", str(root), "--max-bytes", "1G", "--min-age-ms", "60000"]) == 0
    set_ = [orjson.loads(line)["retention"] for line in capsys.readouterr().out.splitlines()]
    assert set_[1] == {
        "max_bytes": 1 << 30,
        "max_age_ms": None,
        "max_records": None,
        "min_age_ms": 60000,
        "max_pinned_bytes": None,
    }
    assert main(["wal", "retention", str(root), "--max-records", "10"]) == 0  # merged
    merged = orjson.loads(capsys.readouterr().out.splitlines()[0])["retention"]
    assert merged["max_bytes"] == 1 << 30 and merged["max_records"] == 10
    assert main(["cdc", "info", str(root / "shard-0")]) == 0
    assert orjson.loads(capsys.readouterr().out)["retention"]["max_records"] == 10
    assert main(["wal", "stream", str(root), "--view", "KEYS_ONLY"]) == 0  # keeps the policy
    capsys.readouterr()
    assert load_config(str(root / "shard-0")).retention.max_records == 10  # type: ignore[union-attr]
    assert main(["wal", "retention", str(root), "--clear"]) == 0
    cleared = orjson.loads(capsys.readouterr().out.splitlines()[0])["retention"]
    assert set(cleared.values()) == {None}
    assert b"retention" not in (root / "shard-0" / "stream.json").read_bytes()
    assert main(["wal", "retention", str(root), "--max-bytes", "12Q"]) == 2


def test_wal_retention_needs_the_writer_lock_and_a_stream_configuration(shard: Path) -> None:
    fill(shard, 10)
    with pytest.raises(InvalidArgumentError, match="no stream configuration"):
        store_retention(str(shard), RetentionPolicy(max_bytes=1))
    keyspace = shard.parent / "keyspace"
    keyspace_shard(keyspace, 10)
    options = ShardOptions(WriterOptions(heartbeat_ms=None), expiry_sweep_ms=0)
    with ShardWriter(keyspace, options), pytest.raises(WriterLockedError):
        store_retention(str(keyspace), RetentionPolicy(max_bytes=1))
    assert main(["wal", "retention", str(shard), "--max-bytes", "1"]) == 2


def test_wal_prune_prints_what_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "data"
    keyspace_shard(root / "shard-0", 300)
    store_retention(str(root / "shard-0"), RetentionPolicy(max_records=50))
    files = log_files(root / "shard-0")
    assert main(["wal", "prune", str(root), "--dry-run"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["dry_run"] and report["deleted"]
    assert {d["reason"] for d in report["deleted"]} == {"max_records"}
    assert log_files(root / "shard-0") == files
    assert main(["wal", "prune", str(root)]) == 0
    done = orjson.loads(capsys.readouterr().out)
    assert done["deleted"] == report["deleted"] and done["deleted_bytes"] > 0
    assert not (root / "shard-0" / done["deleted"][0]["segment"]).exists()
    consumers.create(root, "c", (list_segments(str(root / "shard-0"))[0],))
    assert main(["wal", "prune", str(root), "--before", "now"]) == 2
    assert "consumer(s) c" in capsys.readouterr().err
    assert main(["wal", "prune", str(root), "--force"]) == 2
    assert main(["wal", "prune", str(root), "--before", "now", "--force"]) == 0
    assert orjson.loads(capsys.readouterr().out)["lost"][0]["consumer"] == "c"
    assert main(["consumer", "ack", str(root), "c", "now"]) == 3
