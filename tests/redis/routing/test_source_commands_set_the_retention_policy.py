"""The retention rules a source command is given (``--retention-*``, ``retention=``) are set on
every shard as its writer opens — ``moonish wal retention`` cannot change a shard a running
writer holds — and the writer applies them as it rotates; rules not given keep their values."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import moonish
from moonish.cdc import shard_read
from moonish.redis.aof.importer import import_aof
from tests.support.cli import run
from tests.support.redis.aof import SLICE


@pytest.mark.slow
def test_an_import_sets_the_rules_it_is_given_and_the_writer_applies_them(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    import_aof(SLICE, data, 2, segment_bytes=8192, retention={"max_records": 200})
    for shard_dir in moonish.shard_dirs(data):
        info = shard_read.info(shard_dir)
        assert info["oldest_lsn"] > 1  # rotations removed the oldest segments
        held = info["next_lsn"] - info["oldest_lsn"]
        assert 200 <= held < 200 + 40  # (at most a segment's records over: whole segments go)
    out = run(
        "wal", "import-aof", str(SLICE), str(data), "--shards", "2", "--retention-max-bytes", "1M"
    )
    assert out.returncode == 0, out.stderr
    shown = run("wal", "retention", str(data))
    for line in shown.stdout.splitlines():
        rules = orjson.loads(line)["retention"]
        assert rules["max_bytes"] == 1 << 20 and rules["max_records"] == 200


def test_a_pipeline_file_takes_the_rules_in_its_source_section(tmp_path: Path) -> None:
    from cli.pipeline import sections
    from moonish.service.config import load_pipeline

    path = tmp_path / "pipeline.toml"
    path.write_text(
        'data_dir = "d"\n[source]\nurl = "redis://h"\nshards = 2\n'
        'retention_max_bytes = "10G"\nretention_max_age_ms = 86400000\n'
    )
    (source,) = load_pipeline(str(path), sections()).parts
    argv = list(source.argv)
    assert argv[argv.index("--retention-max-bytes") + 1] == "10G"
    assert argv[argv.index("--retention-max-age-ms") + 1] == "86400000"
