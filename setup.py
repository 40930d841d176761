"""moonish's build (the metadata is in pyproject.toml): the modules listed in its
``[tool.moonish] mypyc`` compiled to C extensions with mypyc, beside their sources, which stay
the same Python (docs/build.md), and the hand-written C extensions of ``NATIVE``.
``MOONISH_PURE=1`` builds neither: pure Python."""

import glob
import os
import tomllib

from setuptools import Extension, setup

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
    setup()
else:
    from mypyc.build import mypycify

    # One shared library (the top-level module moonish__mypyc: mypyc expects it above the
    # packages) holds the code of all, so calls between the modules are C calls; each module
    # is a small extension beside its source that loads it.
    setup(ext_modules=[*mypycify(compiled(), opt_level="3", group_name="moonish"), *NATIVE])
