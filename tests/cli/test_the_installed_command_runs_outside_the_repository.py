"""The installed ``moonish`` script imports the repository's ``cli/`` as ``moonish_cli``: a
command module that imported ``cli.*`` by its folder name worked from the repository's root
(where the other tests run it) and failed with ModuleNotFoundError anywhere else."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson

from tests.support.paths import ROOT
from tests.support.redis.aof import SLICE


def test_no_command_module_imports_cli_by_its_folder_name() -> None:
    absolute = re.compile(r"^\s*(from cli[. ]|import cli\b)", re.MULTILINE)
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "cli").rglob("*.py"))
        if absolute.search(path.read_text())
    ]
    assert offenders == []


def test_import_aof_runs_from_a_directory_outside_the_repository(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "moonish"
    out = subprocess.run(
        [str(script), "wal", "import-aof", str(SLICE), "data", "--shards", "2"],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert orjson.loads(out.stdout)["commands"] > 0
