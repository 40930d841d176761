"""cdc export: complete files only, names by shard and LSN range, exactly once across kills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

import moonish
import moonish.log.reader
from moonish.errors import CorruptionError, InvalidArgumentError, UnavailableError
from moonish.redis.aof.importer import import_aof
from moonish.sinks.export import STATE_NAME, Exporter, ExportOptions, file_name
from moonish.state.shard import ShardWriter
from tests.support.cli import run
from tests.support.golden import segments
from tests.support.paths import ROOT
from tests.support.wal import flip, kv, open_writer

SLICE = ROOT / "fixtures" / "redis-aof" / "slice" / "appendonlydir"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "data"
    import_aof(SLICE, path, 2)
    return path


def exported(out: Path) -> list[tuple[int, int]]:
    """(shard, lsn) of every envelope in the complete export files, in file order."""
    seen = []
    for name in sorted(os.listdir(out)):
        if name.startswith("shard-"):
            for line in (out / name).read_bytes().splitlines():
                source = orjson.loads(line)["source"]
                seen.append((source["shard"], source["lsn"]))
    return seen


def every_event(data: Path) -> list[tuple[int, int]]:
    events = []
    for shard_dir in moonish.shard_dirs(data):
        with moonish.tail(shard_dir) as stream:
            events += [(event.shard, event.lsn) for event in stream]
    return events


def test_files_are_named_by_range_and_hold_each_change_once(data: Path, tmp_path: Path) -> None:
    with Exporter(data, tmp_path, ExportOptions(max_records_per_file=700)) as exporter:
        stats = exporter.run()
    assert stats.records == len(every_event(data)) == 3473
    assert (tmp_path / file_name(0, 1, 700)).exists()
    assert (tmp_path / file_name(1, 1401, 1575)).exists()  # 1575: the import's position marker
    assert sorted(exported(tmp_path)) == sorted(every_event(data))
    state = orjson.loads((tmp_path / STATE_NAME).read_bytes())
    assert state["shards"] == {"0": 1900, "1": 1576}
    with Exporter(data, tmp_path) as exporter:  # nothing new: no file, same cursors
        assert exporter.run().files == 0


def test_a_file_placed_before_the_cursor_commit_is_not_written_again(
    data: Path, tmp_path: Path
) -> None:
    with Exporter(data, tmp_path, ExportOptions(max_records_per_file=1000)) as exporter:
        exporter.run()
    # The crash window: the last files were renamed into place, the cursor not yet committed.
    (tmp_path / STATE_NAME).write_bytes(
        orjson.dumps({"format": "moonish-export", "version": 1, "shards": {"0": 1001, "1": 1}})
    )
    with Exporter(data, tmp_path, ExportOptions(max_records_per_file=1000)) as exporter:
        assert exporter.cursors == {0: 1900, 1: 1576}
        assert exporter.run().files == 0
    assert sorted(exported(tmp_path)) == sorted(every_event(data))


def test_files_that_do_not_continue_the_cursor_are_refused(data: Path, tmp_path: Path) -> None:
    (tmp_path / file_name(0, 5, 9)).write_bytes(b"")
    with pytest.raises(InvalidArgumentError, match="does not continue the export cursor 1"):
        Exporter(data, tmp_path)


def test_one_export_per_directory(data: Path, tmp_path: Path) -> None:
    with Exporter(data, tmp_path), pytest.raises(UnavailableError, match="another export"):
        Exporter(data, tmp_path)


@pytest.mark.slow
def test_killed_at_any_moment_then_rerun_holds_every_change_once(
    data: Path, tmp_path: Path
) -> None:
    command = [
        sys.executable,
        "-m",
        "cli.main",
        "cdc",
        "export",
        str(data),
        str(tmp_path),
        "--follow",
        "--max-records-per-file",
        "37",
        "--max-file-age-ms",
        "0",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for delay_s in (0.4, 0.7, 1.0, 1.3):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        time.sleep(delay_s)
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert len(exported(tmp_path)) == len(set(exported(tmp_path)))  # never a duplicate
    with Exporter(data, tmp_path, ExportOptions(max_records_per_file=37)) as exporter:
        exporter.run()
    assert sorted(exported(tmp_path)) == sorted(every_event(data))


def test_follow_writes_aged_files_and_stops_on_sigterm(data: Path, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "cli.main",
        "cdc",
        "export",
        str(data),
        str(tmp_path),
        "--follow",
        "--max-file-age-ms",
        "50",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(exported(tmp_path)) < 3473:
        assert time.monotonic() < deadline, "the follower did not write its files"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert b"shard 0: 1900, shard 1: 1576" in out


def test_export_places_every_change_before_the_damage_in_files_then_raises(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with open_writer(data / "shard-0", segment_bytes=400) as writer:
        for i in range(60):
            writer.append(kv(b"key-%d" % i))
    damaged = segments(data / "shard-0")[3]
    flip(damaged, 0)
    out = tmp_path / "export"
    with Exporter(data, out) as exporter, pytest.raises(CorruptionError):
        exporter.run()
    lines = b"".join(path.read_bytes() for path in sorted(out.glob("shard-*.ndjson")))
    lsns = [orjson.loads(line)["source"]["lsn"] for line in lines.splitlines()]
    assert lsns == list(range(1, int(damaged.stem, 16)))
    flip(damaged, 0)
    with Exporter(data, out) as exporter:
        assert exporter.run().records == 60 - len(lsns)


# -- an export directory holds the export of one data directory -----------------------------
@pytest.mark.slow
def test_an_export_of_another_data_directory_is_refused(data: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    import_aof(SLICE, other, 2)
    for shard in ("shard-0", "shard-1"):  # more LSNs than `data`: it would continue its cursors
        with ShardWriter(other / shard) as writer:
            writer.execute(0, ["SET", "more", "1"])
    out_dir = tmp_path / "export"
    assert run("cdc", "export", str(data), str(out_dir)).returncode == 0
    before = {name: (out_dir / name).read_bytes() for name in os.listdir(out_dir)}
    out = run("cdc", "export", str(other), str(out_dir))
    assert out.returncode == 2, out.stderr
    message = out.stderr.decode()
    assert f"export of {data.resolve()} (2 shards), not of {other.resolve()} (2 shards)" in message
    assert {name: (out_dir / name).read_bytes() for name in os.listdir(out_dir)} == before
    with pytest.raises(InvalidArgumentError, match="holds the export of"):
        Exporter(data / "shard-0", out_dir)  # one shard of it is another source too


def test_the_same_source_by_another_path_continues(data: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(data)
    with Exporter(data, tmp_path / "export") as exporter:
        assert exporter.run().records == 3473
    with Exporter(link, tmp_path / "export") as exporter:
        assert exporter.run().records == 0
    state = orjson.loads((tmp_path / "export" / STATE_NAME).read_bytes())
    assert state["version"] == 2
    assert state["source"] == {"path": str(data.resolve()), "shards": 2}


def test_a_version_1_export_is_continued_and_given_its_source(data: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "export"
    out_dir.mkdir()
    (out_dir / STATE_NAME).write_bytes(
        orjson.dumps({"format": "moonish-export", "version": 1, "shards": {"0": 1, "1": 1}})
    )
    with Exporter(data, out_dir) as exporter:
        assert exporter.run().records == 3473
    assert orjson.loads((out_dir / STATE_NAME).read_bytes())["source"]["shards"] == 2
