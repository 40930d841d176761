"""A wheel of moonish installs the repository's ``cli/`` folder as ``moonish_cli``, with the
``moonish`` console script pointing there, and no top-level ``cli``; installed, the command
runs from a directory that holds a folder named ``cli``."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pure-Python wheel built from a copy of the sources (the build writes beside them)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("moonish", "cli"):
        shutil.copytree(
            ROOT / name, source / name, ignore=shutil.ignore_patterns("*.so", "__pycache__")
        )
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    subprocess.run(
        [*pip_wheel, "--no-build-isolation", "--wheel-dir", str(out), str(source)],
        env={**os.environ, "MOONISH_PURE": "1"},
        capture_output=True,
        timeout=240,
        check=True,
    )
    (built,) = out.glob("moonish-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_holds_moonish_and_moonish_cli_and_no_cli(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith("-info")}
        (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
        scripts = configparser.ConfigParser()
        scripts.read_string(archive.read(entry_points).decode())
    assert tops == {"moonish", "moonish_cli"}
    assert "moonish_cli/wal/import_aof.py" in names and "moonish_cli/__init__.py" in names
    assert dict(scripts["console_scripts"]) == {"moonish": "moonish_cli.main:entry"}


@pytest.mark.slow
def test_the_installed_command_runs_from_a_directory_holding_a_cli_folder(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    elsewhere = tmp_path / "project"
    (elsewhere / "cli").mkdir(parents=True)
    (elsewhere / "cli" / "__init__.py").write_text("raise ImportError('not moonish')\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    for command in (
        ["-m", "moonish_cli.main"],
        ["-c", "from moonish_cli.main import entry; entry()"],
    ):
        out = subprocess.run(
            [sys.executable, *command, "cdc", "--help"],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert b"moonish cdc tail data/shard-0 --follow" in out.stdout
