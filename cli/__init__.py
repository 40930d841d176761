"""The ``moonish`` command line: thin click commands that parse, call the library and print.

Installed, this package is ``moonish_cli`` (setup.py maps the repository's ``cli/`` folder to
that name, so a wheel installs no top-level ``cli``); in the repository it is also importable
as ``cli``. Its modules import each other relatively, so both names work.

Importing it first checks that ``import moonish`` finds the ``moonish`` package installed
beside it, before any of moonish's code runs (:func:`check_moonish`).
"""

import importlib.util
import os


def check_moonish() -> None:
    """Check that ``import moonish`` loads the package beside this one (the same
    site-packages directory, or the same repository), not a folder or module named ``moonish``
    that comes first on ``sys.path``: ``python -m`` and ``python -c`` put the current
    directory there, so a directory holding a clone named ``moonish`` would shadow it.

    Raises:
        ImportError: another ``moonish`` comes first; the message names where it is, the
            directory holding it (the one to leave) and the package it hides.
    """
    expected = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "moonish")
    spec = importlib.util.find_spec("moonish")
    if spec is None:
        return  # not installed at all: the import itself says so
    if spec.origin is not None and spec.has_location:
        found = spec.origin
        if os.path.basename(found).startswith("__init__."):
            found = os.path.dirname(found)
    else:  # a namespace package: folders named moonish without an __init__.py
        found = next(iter(spec.submodule_search_locations or ()), "?")
    if os.path.realpath(found) == os.path.realpath(expected):
        return
    holder = os.path.dirname(os.path.abspath(found))
    where = "the current directory" if holder == os.getcwd() else "the directory"
    raise ImportError(
        f"moonish: Python imports the package moonish from {found}, not the moonish installed "
        f"with this command ({expected}): {where} {holder} holds {os.path.basename(found)}, which "
        "comes first on sys.path. Run moonish from another directory (or rename it there)."
    )


check_moonish()
