"""Imports that can be retried: an import killed anywhere or failed, fixed and rerun, applies every
command exactly once; one that fails before writing anything leaves nothing."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from moonish.errors import CommandError, UnsupportedFormatError
from moonish.redis.aof.importer import import_aof
from tests.support.paths import ROOT
from tests.support.redis.aof import INCR, records, resp, write_aof
from tests.support.scale import scaled

KILL_SCRIPT = """
import sys
from moonish.redis.aof.importer import import_aof
print("importing", flush=True)
import_aof(sys.argv[1], sys.argv[2], 3)
"""


@pytest.mark.slow
def test_an_import_killed_anywhere_and_rerun_applies_every_command_once(tmp_path: Path) -> None:
    """SIGKILL the import at random moments, rerun it each time: the records equal those of
    one uninterrupted import (the same changes, in the same order, none twice)."""
    aof = write_aof(tmp_path, list(synthetic_commands(random.Random(7), scaled(60_000))))
    began = time.monotonic()
    import_aof(aof, tmp_path / "once", 3)
    took = time.monotonic() - began  # kills fall within an import's run, however fast it is
    expected = records(tmp_path / "once")
    data = tmp_path / "data"
    rng = random.Random(3)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kills = 0
    for _ in range(4):
        with subprocess.Popen(
            [sys.executable, "-c", KILL_SCRIPT, str(aof), str(data)],
            env=env,
            stdout=subprocess.PIPE,
        ) as process:
            assert process.stdout is not None
            process.stdout.readline()  # the import starts (Python and moonish are loaded)
            time.sleep(rng.uniform(0.1, 0.9) * took)
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                kills += 1
    assert kills >= 1
    import_aof(aof, data, 3)
    assert records(data) == expected
    assert import_aof(aof, data, 3).records == 0


def synthetic_commands(rng: random.Random, count: int) -> Iterator[bytes]:
    """Commands as Redis logs them, MULTI/EXEC blocks and DEL across shards included."""
    for i in range(count):
        key = b"k%d" % rng.randrange(300)
        choice = rng.randrange(6)
        if choice == 0:
            yield resp(b"INCR", key + b":n")
        elif choice == 1:
            yield resp(b"RPUSH", key + b":l", b"%d" % i)
        elif choice == 2:
            yield resp(b"HSET", key + b":h", b"f%d" % rng.randrange(5), b"%d" % i)
        elif choice == 3:
            yield (
                resp(b"MULTI")
                + resp(b"SADD", key + b":s", b"%d" % i)
                + resp(b"INCRBY", key + b":n", b"2")
                + resp(b"EXEC")
            )
        elif choice == 4:
            yield resp(b"DEL", key + b":s", b"k%d:l" % rng.randrange(300))
        else:
            yield resp(b"SELECT", b"%d" % rng.randrange(3))


def test_a_failed_import_fixed_and_rerun_continues_where_it_stopped(tmp_path: Path) -> None:
    aof = write_aof(
        tmp_path,
        [resp(b"INCR", b"n%d" % (i % 7)) for i in range(30)]
        + [resp(b"LPUSH", b"n1", b"x")]  # WRONGTYPE: Redis never logged this
        + [resp(b"RPUSH", b"l%d" % (i % 5), b"%d" % i) for i in range(30)],
    )
    with pytest.raises(CommandError, match="WRONGTYPE") as info:
        import_aof(aof, tmp_path / "data", 2)
    assert info.value.path == str(aof / INCR)
    data = (aof / INCR).read_bytes()
    bad = resp(b"LPUSH", b"n1", b"x")
    (aof / INCR).write_bytes(data.replace(bad, resp(b"LPUSH", b"zz", b"x")))
    report = import_aof(aof, tmp_path / "data", 2)
    assert report.commands <= 31 + 2  # the rest (and shards' no-op replays of the tail)
    write_aof(tmp_path / "ref", [])
    reference = tmp_path / "ref" / "appendonlydir"
    shutil.copy(aof / INCR, reference / INCR)
    import_aof(reference, tmp_path / "ref-data", 2)
    assert records(tmp_path / "data") == records(tmp_path / "ref-data")
    counts = Counter(op for shard in records(tmp_path / "data") for op, _, _ in shard)
    assert counts == {"c": 7 + 5 + 1, "u": 23 + 25}  # every INCR and RPUSH exactly once


def test_an_import_that_fails_before_writing_anything_leaves_nothing(tmp_path: Path) -> None:
    aof = write_aof(tmp_path, [resp(b"MODULE.CMD", b"k")])
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(UnsupportedFormatError, match=r"MODULE\.CMD"):
        import_aof(aof, tmp_path / "data", 2)
    assert sorted(tmp_path.rglob("*")) == before
