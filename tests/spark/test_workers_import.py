"""What Spark's Python workers, started in a directory, would import as ``moonish``
(moonish.spark.workers): a package or module there comes first; folders without
``__init__.py`` only when no entry of ``sys.path`` holds a package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from moonish.errors import InvalidArgumentError
from moonish.spark.workers import PACKAGE_DIR, check_workers_import, shadowing_moonish
from tests.support.paths import ROOT


def test_a_package_named_moonish_in_the_directory_shadows_this_one(tmp_path: Path) -> None:
    (tmp_path / "moonish").mkdir()
    (tmp_path / "moonish" / "__init__.py").write_text("")
    assert shadowing_moonish(str(tmp_path)) == str(tmp_path / "moonish")
    with pytest.raises(InvalidArgumentError) as raised:
        check_workers_import(str(tmp_path))
    assert raised.value.path == str(tmp_path)
    assert f"would import {tmp_path / 'moonish'} as moonish" in str(raised.value)


def test_a_module_named_moonish_in_the_directory_shadows_this_one(tmp_path: Path) -> None:
    (tmp_path / "moonish.py").write_text("")
    assert shadowing_moonish(str(tmp_path)) == str(tmp_path / "moonish.py")


def test_a_folder_without_init_does_not_shadow_a_package_on_the_path(tmp_path: Path) -> None:
    (tmp_path / "moonish").mkdir()
    assert shadowing_moonish(str(tmp_path)) is None
    assert shadowing_moonish(str(ROOT)) is None  # the repository: this very package
    check_workers_import(str(tmp_path))


def test_a_folder_without_init_shadows_a_package_found_outside_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with an editable install, whose finder comes after the path's namespace folders."""
    (tmp_path / "moonish").mkdir()
    parent = Path(PACKAGE_DIR).parent.resolve()
    monkeypatch.chdir(tmp_path.parent)  # "" is the current directory
    kept = [entry for entry in sys.path if Path(entry or ".").resolve() != parent]
    monkeypatch.setattr(sys, "path", kept)
    assert shadowing_moonish(str(tmp_path)) == str(tmp_path / "moonish")


def test_a_directory_without_moonish_shadows_nothing(tmp_path: Path) -> None:
    assert shadowing_moonish(str(tmp_path)) is None
