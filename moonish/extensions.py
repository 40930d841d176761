"""The check that no compiled module is older than its source (docs/build.md).

``setup.py`` compiles the modules of ``[tool.moonish] mypyc`` (pyproject.toml) to C extensions
beside their ``.py`` files, and Python imports an extension in preference to its source: after
an edit, a checkout or a pull, the old extension would run code that is no longer there. In a
source checkout (an editable install, ``make install``) ``import moonish`` refuses that; an
installed wheel ships sources and extensions of one build and is not checked.
"""

from __future__ import annotations

import importlib.machinery
import os
import types


def stale_extensions(package_dir: str) -> list[str]:
    """The compiled modules under ``package_dir`` whose extension is older than their source
    (the ``.py`` mypyc compiled, or the ``.c`` of a hand-written extension), or has no source
    any more, as paths of the sources."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    stale = []
    for directory, _, names in os.walk(package_dir):
        for name in names:
            suffix = next((s for s in suffixes if name.endswith(s)), None)
            if suffix is None:
                continue
            extension = os.path.join(directory, name)
            stem = os.path.join(directory, name[: -len(suffix)])
            # mypyc's from the module's .py; a hand-written one (setup.py NATIVE) from its .c
            source = stem + ".c" if os.path.exists(stem + ".c") else stem + ".py"
            try:
                if os.stat(source).st_mtime_ns <= os.stat(extension).st_mtime_ns:
                    continue
            except FileNotFoundError:
                pass
            stale.append(source)
    return sorted(stale)


def is_compiled(module: types.ModuleType) -> bool:
    """Whether ``module`` runs from an extension (a compiled build) rather than its source."""
    return str(module.__file__).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
"""The ``moonish`` package's directory."""


def check_extensions(package_dir: str = PACKAGE_DIR) -> None:
    """Raise ImportError if ``package_dir`` is in a source checkout (``setup.py`` beside it)
    and holds a stale extension (:func:`stale_extensions`). ``moonish/__init__`` calls it
    before it imports anything else."""
    if not os.path.exists(os.path.join(os.path.dirname(package_dir), "setup.py")):
        return
    stale = stale_extensions(package_dir)
    if stale:
        shown = ", ".join(os.path.relpath(path, os.path.dirname(package_dir)) for path in stale)
        raise ImportError(
            f"compiled moonish modules are older than their source ({shown}): rebuild them "
            "with `make install`, or remove them with `make pure` to run pure Python "
            "(docs/build.md)"
        )
