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

from tests.support.paths import ROOT
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


def test_an_import_alone_ends_the_run(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(f'data_dir = "data"\n[source]\naof = "{AOF}"\nshards = 1\n')
    log = tmp_path / "run.log"
    assert start(pipeline, log).wait(120) == 0
    assert "supervisor finished: every part is done" in log.read_text()
    assert (tmp_path / "data" / "shard-0").is_dir()
