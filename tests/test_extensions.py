"""The check that refuses compiled modules older than their source (moonish.extensions,
docs/build.md)."""

from __future__ import annotations

import importlib.machinery
import os
from pathlib import Path

import pytest

from moonish.extensions import check_extensions, is_compiled, stale_extensions

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _files(root: Path, ages: dict[str, int]) -> Path:
    """``root/moonish`` with the files of ``ages`` (name -> mtime in seconds)."""
    package = root / "moonish"
    for name, mtime in ages.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        os.utime(path, (mtime, mtime))
    return package


def test_an_extension_older_than_its_source_or_without_one_is_stale(tmp_path: Path) -> None:
    package = _files(
        tmp_path,
        {
            "clock.py": 100,
            f"clock{SUFFIX}": 200,  # built after the edit: current
            "state/values.py": 300,
            f"state/values{SUFFIX}": 200,  # edited since the build
            f"state/gone{SUFFIX}": 200,  # its source was removed
            "cdc/api.py": 400,  # not compiled
            "log/_cframes.c": 300,
            f"log/_cframes{SUFFIX}": 200,  # hand-written C, edited since
            "state/_cjson.c": 100,
            f"state/_cjson{SUFFIX}": 200,  # hand-written C, current
        },
    )
    assert stale_extensions(str(package)) == [
        str(package / "log" / "_cframes.c"),
        str(package / "state" / "gone.py"),
        str(package / "state" / "values.py"),
    ]


def test_import_refuses_stale_extensions_in_a_source_checkout_only(tmp_path: Path) -> None:
    package = _files(tmp_path, {"fileio.py": 300, f"fileio{SUFFIX}": 200})
    check_extensions(str(package))  # no setup.py beside it: an installed wheel
    (tmp_path / "setup.py").write_text("")
    with pytest.raises(ImportError, match=r"older than their source \(moonish/fileio\.py\)"):
        check_extensions(str(package))
    os.utime(package / f"fileio{SUFFIX}", (400, 400))  # rebuilt
    check_extensions(str(package))


def test_a_compiled_build_has_its_c_extensions() -> None:
    # The C extensions (setup.py NATIVE) are built with the mypyc ones; their tests
    # (test_c_frame_encoder, test_c_frame_scanner, test_c_json, test_c_envelope_encoder) are
    # skipped only in a pure build.
    from moonish.cdc import envelope
    from moonish.log import frames
    from moonish.values import plainjson

    assert is_compiled(frames) == is_compiled(plainjson)
    if is_compiled(frames):
        assert frames._cframes is not None and plainjson._cjson is not None
        assert is_compiled(frames._cframes) and is_compiled(plainjson._cjson)
        assert plainjson.quote is plainjson._cjson.quote
        assert frames._SCAN is frames._cframes.scan
        assert envelope._ENCODE_CHANGES is envelope._cenvelope.encode_changes
