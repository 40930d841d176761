"""The checks before an import creates anything (moonish.redis.routing.target, .shards): the open-
file limit, descriptors running out while shards open, and targets that make no sense (a shard,
the AOF directory, a file, other shards)."""

from __future__ import annotations

import errno
import os
import re
import resource
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

import moonish.redis.routing.shards
from moonish.errors import InvalidArgumentError, UnavailableError, UnsupportedFormatError
from moonish.redis.aof.importer import import_aof
from moonish.redis.routing.target import DESCRIPTORS_PER_SHARD
from moonish.state.shard import ShardWriter
from tests.support.cli import MOONISH
from tests.support.paths import ROOT
from tests.support.redis.aof import INCR, SLICE, all_envelopes, aof_commands, copy_aof, tree


def import_cli(
    target: Path, shards: int, nofile: tuple[int, int] | None = None, aof: Path = SLICE
) -> subprocess.CompletedProcess[bytes]:
    """``moonish wal import-aof`` in a child process, with ``RLIMIT_NOFILE`` (soft, hard)."""

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    return subprocess.run(
        [*MOONISH, "wal", "import-aof", str(aof), str(target), "--shards", str(shards)],
        capture_output=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        preexec_fn=limit,
    )


@pytest.mark.slow
def test_a_hard_descriptor_limit_too_low_refuses_before_creating_anything(
    tmp_path: Path,
) -> None:
    out = import_cli(tmp_path / "data", 400, nofile=(256, 256))
    assert out.returncode == 2, out.stderr
    assert out.stdout == b"" and b"Traceback" not in out.stderr
    lines = out.stderr.decode().splitlines()
    assert len(lines) == 1, lines  # no progress bar before the refusal
    needed = re.fullmatch(
        r"moonish: invalid_argument: importing into 400 shards needs (\d+) open file "
        r"descriptors \(4 per shard plus (\d+) for the process\), but this process may open "
        r"only 256 \(RLIMIT_NOFILE hard limit\); raise the limit to at least \1 "
        r"\(ulimit -n \1\) or import into at most (\d+) shards; nothing was created",
        lines[0],
    )
    assert needed, lines[0]
    total, others, fit = map(int, needed.groups())
    per = DESCRIPTORS_PER_SHARD
    assert total == per * 400 + others and per * fit + others <= 256 < per * (fit + 1) + others
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_a_low_soft_descriptor_limit_is_raised_up_to_the_hard_limit(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard == resource.RLIM_INFINITY or hard >= 4096, f"hard RLIMIT_NOFILE {hard} < 4096"
    out = import_cli(tmp_path / "data", 400, nofile=(256, 4096))
    assert out.returncode == 0, out.stderr
    summary = orjson.loads(out.stdout)
    writes = [c for c in aof_commands(SLICE) if c[0].upper() not in (b"SELECT", b"MULTI", b"EXEC")]
    assert summary["commands"] == len(writes) and len(summary["per_shard"]) == 400
    assert summary["records"] == sum(summary["per_shard"]) > 0
    assert len(list((tmp_path / "data").glob("shard-*"))) == 400


def test_a_soft_limit_that_cannot_be_raised_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(resource_: int, limits: tuple[int, int]) -> None:
        raise ValueError("not allowed to raise maximum limit")

    monkeypatch.setattr(resource, "getrlimit", lambda _: (64, resource.RLIM_INFINITY))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    with pytest.raises(InvalidArgumentError, match=r"may open only 64 \(RLIMIT_NOFILE soft"):
        import_aof(SLICE, tmp_path / "data", 40)
    assert tree(tmp_path) == []


def failing_writers(
    monkeypatch: pytest.MonkeyPatch, fail_at: int, error: BaseException
) -> list[ShardWriter]:
    """Make the importer's ``fail_at``-th shard writer fail with ``error`` after making its
    directory and LOCK file (as a writer running out of descriptors does); returns the
    writers that opened."""
    real = ShardWriter
    opened: list[ShardWriter] = []

    def writer(shard_dir: str, *args: object) -> ShardWriter:
        if len(opened) == fail_at:
            os.makedirs(shard_dir, exist_ok=True)
            Path(shard_dir, "LOCK").touch()
            raise error
        opened.append(real(shard_dir, *args))  # type: ignore[arg-type]
        return opened[-1]

    monkeypatch.setattr(moonish.redis.routing.shards, "ShardWriter", writer)
    return opened


def test_running_out_of_descriptors_while_opening_is_an_error_that_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = str(tmp_path / "out" / "data" / "shard-3" / "LOCK")
    opened = failing_writers(monkeypatch, 3, OSError(errno.EMFILE, "Too many open files", lock))
    with pytest.raises(
        UnavailableError, match="cannot open shard 3 of 8: Too many open files"
    ) as info:
        import_aof(SLICE, tmp_path / "out" / "data", 8)
    assert info.value.path == lock and info.value.kind == "unavailable"
    assert len(opened) == 3  # closed again: the descriptor guard checks it
    assert tree(tmp_path) == []  # shard-0..3, data and out were all made by the import


def test_a_late_failure_keeps_the_shards_that_were_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    import_aof(SLICE, data, 2)
    before = [[e["source"] for e in es] for es in all_envelopes(data, 2)]
    failing_writers(monkeypatch, 1, OSError(errno.ENFILE, "Too many open files in system"))
    with pytest.raises(UnavailableError, match="open files in system") as info:
        import_aof(SLICE, data, 2)
    assert info.value.path == str(data / "shard-1")
    monkeypatch.undo()
    assert [[e["source"] for e in es] for es in all_envelopes(data, 2)] == before
    assert (data / "source.json").exists()


def import_into_a_shard(tmp_path: Path) -> tuple[Path, Path]:
    import_aof(SLICE, tmp_path / "data", 2)
    return SLICE, tmp_path / "data" / "shard-0"


def import_inside_a_shard(tmp_path: Path) -> tuple[Path, Path]:
    import_aof(SLICE, tmp_path / "data", 2)
    return SLICE, tmp_path / "data" / "shard-1" / "more"


def import_as_a_new_shard(tmp_path: Path) -> tuple[Path, Path]:
    import_aof(SLICE, tmp_path / "data", 2)
    return SLICE, tmp_path / "data" / "shard-2"


def import_into_the_aof(tmp_path: Path) -> tuple[Path, Path]:
    aof = copy_aof(tmp_path, (SLICE / INCR).read_bytes())
    return aof, aof


def import_inside_the_aof(tmp_path: Path) -> tuple[Path, Path]:
    aof = copy_aof(tmp_path, (SLICE / INCR).read_bytes())
    return aof, aof / "data"


def import_around_the_aof(tmp_path: Path) -> tuple[Path, Path]:
    aof = tmp_path / "data" / "shard-0" / "appendonlydir"
    shutil.copytree(SLICE, aof)
    return aof, tmp_path / "data"


def import_into_a_file(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data").write_bytes(b"not a directory")
    return SLICE, tmp_path / "data"


def import_under_a_file(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data").write_bytes(b"not a directory")
    return SLICE, tmp_path / "data" / "sub"


def import_into_other_shards(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data" / "shard-0").mkdir(parents=True)
    (tmp_path / "data" / "shard-7").mkdir()
    return SLICE, tmp_path / "data"


def import_next_to_a_shard_file(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "shard-notes.txt").write_text("mine")
    return SLICE, tmp_path / "data"


def import_a_missing_aof_file(tmp_path: Path) -> tuple[Path, Path]:
    aof = copy_aof(tmp_path, b"")
    (aof / INCR).unlink()
    return aof, tmp_path / "data"


def import_an_rdb_incremental_file(tmp_path: Path) -> tuple[Path, Path]:
    aof = copy_aof(tmp_path, b"REDIS0011\xfa\x09redis-ver")
    return aof, tmp_path / "data"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (import_into_a_shard, "this is a shard directory (it holds WAL files), not a data dir"),
        (import_inside_a_shard, "the data directory would be inside the shard directory "),
        (import_as_a_new_shard, "this is a shard of the data directory "),
        (import_into_the_aof, "the data directory is the AOF directory; pass a directory of"),
        (import_inside_the_aof, "the data directory is inside the AOF directory "),
        (import_around_the_aof, "the AOF directory is inside shard-0 of the data directory"),
        (import_into_a_file, "the data directory exists and is not a directory"),
        (import_under_a_file, "the data directory cannot be created: "),
        (import_into_other_shards, "the data directory holds shard-7; an import into 2 shards"),
        (import_next_to_a_shard_file, "the data directory holds 'shard-notes.txt', which is not a"),
        (import_a_missing_aof_file, "an AOF file listed in the manifest is missing"),
        (import_an_rdb_incremental_file, "an incremental AOF file starts with an RDB header"),
    ],
)
def test_nonsensical_targets_are_refused_before_creating_anything(
    tmp_path: Path, setup: Callable[[Path], tuple[Path, Path]], message: str
) -> None:
    aof, target = setup(tmp_path)
    before = tree(tmp_path)
    with pytest.raises((InvalidArgumentError, UnsupportedFormatError)) as info:
        import_aof(aof, target, 2)
    assert info.value.message.startswith(message), info.value.message
    named = [target] + [aof / name for name in (INCR, "appendonly.aof.1.base.aof")]
    assert info.value.path in [str(path) for path in named]
    assert tree(tmp_path) == before


def test_the_cli_refuses_a_shard_directory_in_one_line(tmp_path: Path) -> None:
    import_aof(SLICE, tmp_path / "data", 2)
    shard = tmp_path / "data" / "shard-0"
    before = tree(tmp_path)
    out = import_cli(shard, 2)
    assert out.returncode == 2 and out.stdout == b""
    assert out.stderr.decode() == (
        "moonish: invalid_argument: this is a shard directory (it holds WAL files), not a data "
        "directory; pass the directory that holds the shard-<k> directories, or a new directory "
        f"({shard})\n"
    )
    assert tree(tmp_path) == before
