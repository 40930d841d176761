"""``moonish run`` with no service to start: the real Redis AOF in fixtures/ imported by the
[source] (once, to its end), then the server started on the imported data; the text log
relays each part's lines under its name; SIGTERM stops the server and run exits 0. Without
another part, run ends with the import."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import moonish
from tests.support.moonish_run import running
from tests.support.paths import ROOT
from tests.support.redis.aof import SLICE
from tests.support.redis.capture import wait_for
from tests.support.servers.serve_util import request

AOF = ROOT / "fixtures" / "redis-aof" / "mixed" / "appendonlydir"


def start(pipeline: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", "run", str(pipeline)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


@pytest.mark.slow
def test_the_import_runs_first_then_the_server_serves_it(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(
        f'data_dir = "data"\n[source]\naof = "{AOF}"\nshards = 2\n[serve]\nport = 0\n'
        "[supervisor]\nstop_timeout_ms = 10000\n"
    )
    log = tmp_path / "run.log"
    process = start(pipeline, log)
    try:

        def url() -> str | None:
            for line in log.read_text().splitlines():
                if line.startswith('serve | {"url"'):
                    return str(orjson.loads(line.removeprefix("serve | "))["url"])
            return None

        wait_for(lambda: url() is not None, "the server's URL", 120)
        text = log.read_text()
        assert text.index("source finished: finished (exit 0)") < text.index("serve started")
        assert "source | {" in text  # the import's JSON summary, relayed under its part
        status, body = request(f"{url()}/v1/changes?since=earliest&limit=5")
        assert status == 200 and len(body["results"]) == 5
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        assert "serve stopped: stopped (exit 0 (stopped))" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.slow
def test_an_import_alone_ends_the_run(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(f'data_dir = "data"\n[source]\naof = "{AOF}"\nshards = 1\n')
    log = tmp_path / "run.log"
    assert start(pipeline, log).wait(120) == 0
    assert "supervisor finished: every part is done" in log.read_text()
    assert (tmp_path / "data" / "shard-0").is_dir()


@pytest.mark.slow
def test_an_export_part_writes_every_change_once(tmp_path: Path) -> None:
    """``[export]`` runs ``cdc export --follow``: after the import, the NDJSON files hold every
    change of the data directory exactly once; SIGTERM stops it with 0."""
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(
        f'data_dir = "data"\n[source]\naof = "{SLICE}"\nshards = 2\n'
        '[export]\nout_dir = "export"\nmax_records_per_file = 500\nmax_file_age_ms = 200\n'
    )
    with running(pipeline) as run:
        wait_for(lambda: run.events("source", "finished"), "the import", 120)
        expected = 0
        for shard_dir in moonish.shard_dirs(tmp_path / "data"):
            with moonish.tail(shard_dir) as stream:
                expected += sum(1 for _ in stream)

        def exported() -> list[dict]:
            return [
                orjson.loads(line)
                for path in sorted((tmp_path / "export").glob("shard-*.ndjson"))
                for line in path.read_bytes().splitlines()
            ]

        wait_for(lambda: len(exported()) == expected, "every change in the files", 120)
        assert run.stop_all() == {"export": 0}  # (the import had finished)
    rows = exported()
    assert len({(row["source"]["shard"], row["source"]["lsn"]) for row in rows}) == expected
