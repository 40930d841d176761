"""What a local read loads: ``import moonish`` and every local ``cdc`` command import none of the
libraries of the server (aiohttp), the Kafka sink (confluent_kafka), Spark (pyspark, pyarrow)
or a live capture (hiredis), nor the commands they do not run (click's lazy group)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.steps import write_steps

HEAVY = ("aiohttp", "confluent_kafka", "pyspark", "pyarrow", "hiredis")

LOADED = """
import json, sys
sys.argv = ["moonish", *sys.argv[1:]]
if len(sys.argv) > 1:
    from cli.main import main
    main(sys.argv[1:])
else:
    import moonish
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})), file=sys.stderr)
print(json.dumps(sorted(name for name in sys.modules if name.startswith("cli."))), file=sys.stderr)
"""


def _loaded(*args: str) -> tuple[set[str], set[str]]:
    out = subprocess.run(
        [sys.executable, "-c", LOADED, *args], capture_output=True, check=True, cwd=ROOT
    )
    packages, commands = out.stderr.decode().strip().splitlines()[-2:]
    return set(json.loads(packages)), set(json.loads(commands))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("local") / "data"
    write_steps(data, 2, [(0, 1, 1), (1, 2, 1)])
    return data


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("cdc", "read", "{shard}", "0", "--limit", "5"),
        ("cdc", "read", "{data}", "earliest", "--limit", "5"),
        ("cdc", "tail", "{shard}"),
        ("cdc", "tail", "{data}"),
        ("cdc", "info", "{data}"),
    ],
    ids=lambda args: (
        " ".join(args[:2]) + (" " + args[2].strip("{}") if len(args) > 2 else "")
        or "import moonish"
    ),
)
def test_a_local_read_loads_no_server_sink_spark_or_capture_library(
    data: Path, args: tuple[str, ...]
) -> None:
    given = [arg.format(data=data, shard=data / "shard-0") for arg in args]
    packages, commands = _loaded(*given)
    assert not packages & set(HEAVY), packages & set(HEAVY)
    if given:  # only the command run, besides the CLI's own modules
        assert commands <= {
            "cli.main",
            "cli.errors",
            "cli.options",
            "cli.params",
            "cli.remote",
            "cli.cdc",
            f"cli.cdc.{given[1]}",
        }, commands
