"""moonish's build (the metadata is in pyproject.toml): the modules listed in its
``[tool.moonish] mypyc`` compiled to C extensions with mypyc, beside their sources, which stay
the same Python (docs/build.md), and the hand-written C extensions of ``NATIVE``.
``MOONISH_PURE=1`` builds neither: pure Python. The repository's ``cli/`` folder is installed
as the package ``moonish_cli`` (``PACKAGES``), so an install adds no top-level ``cli``."""

import glob
import os
import tomllib

from setuptools import Extension, find_packages, setup

CLI_NAME = "moonish_cli"
"""The name the ``cli/`` folder is installed under: one of moonish's own, so a folder named
``cli`` elsewhere on ``sys.path`` (or another distribution's ``cli``) neither shadows it nor is
shadowed by it."""
PACKAGES = [
    *find_packages(include=["moonish", "moonish.*"]),
    *(CLI_NAME + name[len("cli") :] for name in find_packages(include=["cli", "cli.*"])),
]
PACKAGE_DIR = {CLI_NAME: "cli"}

# Hand-written C extensions (docs/build.md): kept to the few pure byte transforms that the write
# path spends its time in, each with the Python it replaces kept for a pure build and compared
# with it in the tests.
NATIVE = [
    Extension("moonish.log._cframes", ["moonish/log/_cframes.c"]),
    Extension("moonish.values._cjson", ["moonish/values/_cjson.c"]),
    Extension("moonish.cdc._cenvelope", ["moonish/cdc/_cenvelope.c"]),
]


def compiled() -> list[str]:
    with open("pyproject.toml", "rb") as handle:
        patterns = tomllib.load(handle)["tool"]["moonish"]["mypyc"]
    # A package's __init__ stays Python: nothing runs there.
    paths = {path for pattern in patterns for path in glob.glob(pattern)}
    return sorted(path for path in paths if os.path.basename(path) != "__init__.py")


if os.environ.get("MOONISH_PURE"):
    setup(packages=PACKAGES, package_dir=PACKAGE_DIR)
else:
    from mypyc.build import mypycify

    # One shared library (the top-level module moonish__mypyc: mypyc expects it above the
    # packages) holds the code of all, so calls between the modules are C calls; each module
    # is a small extension beside its source that loads it.
    setup(
        packages=PACKAGES,
        package_dir=PACKAGE_DIR,
        ext_modules=[*mypycify(compiled(), opt_level="3", group_name="moonish"), *NATIVE],
    )
