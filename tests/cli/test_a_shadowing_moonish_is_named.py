"""A folder named ``moonish`` in the current directory that Python would import in place of
the installed package is refused with a message naming it: by the command when ``python -m``
or ``-c`` puts that directory first on ``sys.path``, and by ``spark materialize`` before Spark
starts, since Spark's Python workers start there with it first on theirs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT


def _shadow(directory: Path) -> Path:
    """``directory`` with a package ``moonish`` of its own; returns the package's folder."""
    package = directory / "moonish"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    return package


def _moonish(launcher: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, *launcher, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_the_command_names_a_moonish_folder_of_the_current_directory(tmp_path: Path) -> None:
    package = _shadow(tmp_path)
    for launcher in (["-m", "cli.main"], ["-c", "from cli.main import entry; entry()"]):
        out = _moonish(launcher, "--version", cwd=tmp_path)
        assert out.returncode == 1
        message = out.stderr.decode().splitlines()[-1]
        assert message.startswith("ImportError: moonish: Python imports the package moonish")
        assert f"from {package}, not the moonish installed with this command" in message
        assert f"the current directory {tmp_path} holds moonish" in message
        assert "Run moonish from another directory" in message


def test_the_command_runs_beside_a_folder_named_moonish_without_init(tmp_path: Path) -> None:
    (tmp_path / "moonish").mkdir()  # a clone's parent: the clone is no package there
    out = _moonish(["-m", "cli.main"], "--version", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(b"moonish, version ")


@pytest.mark.spark  # the command imports PySpark before it looks
def test_spark_materialize_refuses_a_directory_whose_moonish_its_workers_would_import(
    tmp_path: Path,
) -> None:
    """Started as the console script is (its own directory first on ``sys.path``, not the
    current one), the command imports the real moonish; the workers would not."""
    work = tmp_path / "work"
    package = _shadow(work)
    (tmp_path / "data" / "shard-0").mkdir(parents=True)
    script = tmp_path / "bin" / "moonish"
    script.parent.mkdir()
    script.write_text("from cli.main import entry\nentry()\n")
    out = _moonish(
        [str(script)],
        *("spark", "materialize", str(tmp_path / "data"), str(tmp_path / "table")),
        *("--checkpoint", str(tmp_path / "ck"), "--master", "local[1]"),
        cwd=work,
    )
    assert out.returncode == 2, out.stderr
    message = out.stderr.decode()
    assert message.startswith("moonish: invalid_argument: Spark's Python workers start in ")
    assert f"would import {package} as moonish instead of the installed package" in message
    assert f"run the command from another directory (or rename it there) ({work})" in message
    assert not (tmp_path / "table").exists()
