"""What each make target installs, from ``make -n`` dry runs into a virtualenv of the test's own:
``make demo`` the package alone; ``make check`` the package and its test tools, ``make lint``
the linters, both pure Python and without a system package; ``make test`` and the targets that
run Spark, Redis or the tests the development set with Java 17 and redis-server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.markers import MARKERS
from tests.support.paths import ROOT

SYSTEM_PACKAGES = ("apt-get", "openjdk", "chromium", "redis-server")


def _make_dry_run(target: str, tmp_path: Path, *, venv_made: bool = False) -> str:
    """The commands ``make -n target`` shows for a virtualenv without stamp files (every
    install step shows); ``venv_made``: its python exists (the virtualenv was created, so the
    steps that create it, shared by every target, do not show)."""
    venv = tmp_path / "venv"
    if venv_made:
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").touch()
    out = subprocess.run(
        ["make", "-n", target, f"VENV={venv}"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    )
    return out.stdout.decode()


def _installs(steps: str) -> list[str]:
    return [line for line in steps.splitlines() if "pip install" in line or "apt-get" in line]


def test_make_demo_installs_only_the_package(tmp_path: Path) -> None:
    steps = _make_dry_run("demo", tmp_path)
    assert "pip install --quiet -e .\n" in steps
    assert ".[dev]" not in steps and "openjdk" not in steps and "redis-server" not in steps


@pytest.mark.parametrize("target", ["test", "bench", "demo-spark", "stress", "golden"])
def test_make_test_installs_the_development_set_and_java_17(tmp_path: Path, target: str) -> None:
    steps = _make_dry_run(target, tmp_path)
    assert "pip install --quiet -e '.[dev]'" in steps
    assert "apt-get install -y -qq openjdk-17-jre-headless" in steps
    assert "apt-get install -y -qq redis-server" in steps


@pytest.mark.parametrize(("target", "extra"), [("lint", "lint"), ("check", "test")])
def test_make_lint_and_check_install_only_their_extra_in_pure_python(
    tmp_path: Path, target: str, extra: str
) -> None:
    venv = tmp_path / "venv"
    steps = _make_dry_run(target, tmp_path, venv_made=True)
    assert _installs(steps) == [
        f"{venv}/bin/pip install --quiet 'setuptools>=77' && "
        f"MOONISH_PURE=1 {venv}/bin/pip install --quiet --no-build-isolation -e '.[{extra}]'"
    ]
    assert not [word for word in SYSTEM_PACKAGES if word in steps]
    fresh = _make_dry_run(target, tmp_path / "fresh")  # the virtualenv created too
    assert ".[dev]" not in fresh
    assert not [word for word in SYSTEM_PACKAGES[1:] if word in fresh]


def test_make_check_runs_every_test_that_needs_no_service(tmp_path: Path) -> None:
    (run,) = [line for line in _make_dry_run("check", tmp_path).splitlines() if " pytest " in line]
    assert " -n 2 " in run
    assert [f"not {marker}" for marker in MARKERS if f"not {marker}" not in run] == []
