"""A data directory remembers its source (``source.json``) and refuses another; each shard stores
the source position it applied, shown by ``cdc info``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from moonish.redis.aof.importer import import_aof
from moonish.redis.routing.sources import SourceMismatchError
from moonish.state.shard import ShardWriter
from tests.support.redis.aof import INCR, resp, write_aof


def test_a_data_directory_refuses_another_source(tmp_path: Path) -> None:
    first = write_aof(tmp_path / "a", [resp(b"SET", b"k", b"v")])
    second = write_aof(tmp_path / "b", [resp(b"SET", b"k", b"v")])
    import_aof(first, tmp_path / "data", 1)
    with pytest.raises(SourceMismatchError, match="follows the AOF"):
        import_aof(second, tmp_path / "data", 1)
    (tmp_path / "data" / "source.json").unlink()
    with pytest.raises(SourceMismatchError, match="does not say which source"):
        import_aof(first, tmp_path / "data", 1)


def test_cdc_info_shows_each_shards_stored_position(tmp_path: Path) -> None:
    """Every shard of an import stores the position it applied (the position markers keep
    idle shards current); a shard written otherwise shows none."""
    from click.testing import CliRunner

    from cli.cdc.info import info

    commands = [resp(b"SET", b"k%d" % n, b"v") for n in range(20)]
    appendonlydir = write_aof(tmp_path / "aof", commands)
    import_aof(appendonlydir, tmp_path / "data", 3)
    size = (appendonlydir / INCR).stat().st_size
    shown = CliRunner().invoke(info, [str(tmp_path / "data")])
    assert shown.exit_code == 0, shown.output
    for facts in orjson.loads(shown.output)["shards"]:
        stored = facts["source_position"]
        assert stored["lsn"] == facts["latest_lsn"]  # the last record carries it
        assert stored["position"] == {"aof": INCR, "offset": size}
        assert stored["text"] == f"{INCR}@{size}"
    one = CliRunner().invoke(info, [str(tmp_path / "data" / "shard-1")])
    assert orjson.loads(one.output)["source_position"]["position"]["offset"] == size
    with ShardWriter(tmp_path / "plain" / "shard-0") as writer:
        writer.execute(0, [b"SET", b"k", b"v"])
    plain = CliRunner().invoke(info, [str(tmp_path / "plain")])
    assert "source_position" not in orjson.loads(plain.output)["shards"][0]
