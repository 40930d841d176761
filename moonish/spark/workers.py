"""Which ``moonish`` Spark's Python workers import.

PySpark starts its Python workers as ``python -m pyspark.daemon`` (or ``pyspark.worker``) in
the directory the JVM runs in, which for a ``local`` master is the driver's current
directory, and ``-m`` puts that directory first on ``sys.path``. A worker unpickles the
``moonish`` data source's readers by importing ``moonish.spark.datasource``; if that
directory holds a folder or module named ``moonish`` (a clone of the repository, seen from
its parent; an unrelated project), the worker imports it instead of the installed package
and the micro-batch fails deep inside Spark. :func:`check_workers_import` finds that before
the query starts. It looks at the driver's directory only: on a cluster, workers run in
directories of their own.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder

from moonish.errors import InvalidArgumentError

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The ``moonish`` package this module belongs to."""


def shadowing_moonish(directory: str) -> str | None:
    """What a Python process started with ``-m`` in ``directory`` (so ``sys.path`` is
    ``directory`` then this process's entries) would import as ``moonish``, when that is not
    this package: the path of the folder or module, or ``None`` when it is this package.

    Found as the interpreter's path finder finds it: a package (a folder with
    ``__init__.py``) or module in the first entry that has one; folders named ``moonish``
    without ``__init__.py`` only when no entry has a package (they then make a namespace
    package, which comes before finders outside ``sys.path`` such as an editable install's).
    """
    spec = PathFinder.find_spec("moonish", [directory, *sys.path])
    if spec is None:
        return None  # found by another finder (an editable install's), as in this process
    if spec.origin is not None and spec.has_location:
        found = spec.origin
        if os.path.basename(found).startswith("__init__."):
            found = os.path.dirname(found)
    else:
        found = next(iter(spec.submodule_search_locations or ()), directory)
    if os.path.realpath(found) == os.path.realpath(PACKAGE_DIR):
        return None
    return found


def check_workers_import(directory: str | None = None) -> None:
    """Check that Python workers started in ``directory`` (default: the current directory)
    would import this ``moonish``.

    Raises:
        InvalidArgumentError: they would import another one (:func:`shadowing_moonish`);
            ``path`` is the directory to leave, the message names what shadows this package.
    """
    directory = os.path.abspath(directory if directory is not None else os.getcwd())
    found = shadowing_moonish(directory)
    if found is None:
        return
    raise InvalidArgumentError(
        f"Spark's Python workers start in this directory, first on their sys.path, and would "
        f"import {found} as moonish instead of the installed package ({PACKAGE_DIR}): run "
        "the command from another directory (or rename it there)",
        path=directory,
    )
