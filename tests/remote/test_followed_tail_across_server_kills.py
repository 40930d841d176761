"""A followed remote tail across server deaths: the server is SIGKILLed mid-stream while a
writer appends, restarted on the same port, and the client, which reconnects by itself from
the last token it received, yields every change exactly once, in order; tokens only grow."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

import moonish
from moonish.cdc.positions import latest_lsn
from moonish.cdc.token import Token
from moonish.remote import ClientOptions, RemoteUnavailableError
from tests.support.paths import ROOT
from tests.support.steps import WRITER, write_steps

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def serve(data: Path, port: int = 0) -> tuple[subprocess.Popen[bytes], str]:
    """``moonish serve`` in a child process; its URL once it listens."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from cli.main import entry; entry()",
            "serve",
            str(data),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        env=ENV,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    process.stdout.close()
    return process, orjson.loads(line)["url"]


def _ends(data: Path) -> tuple[int, int]:
    return latest_lsn(str(data / "shard-0")), latest_lsn(str(data / "shard-1"))


@pytest.mark.slow
def test_a_followed_tail_survives_server_kills_with_no_gap_and_no_duplicate(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    write_steps(data, 2, [(0, 1, 1), (1, 1, 1)])
    server, url = serve(data)
    port = int(url.rsplit(":", 1)[1])
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(data), "500"], env=ENV)
    options = ClientOptions(heartbeat_ms=200, retry_first_ms=20, retry_max_ms=200)
    received: list[Any] = []
    tokens: list[Token] = []
    client = moonish.connect(url, options=options)
    stream = client.tail("earliest", follow=True)

    def consume() -> None:
        for event in stream:
            received.append((event.shard, event.lsn))
            tokens.append(stream.token)

    reader = threading.Thread(target=consume)
    reader.start()
    kills = 0
    try:
        for pause in (0.4, 0.6):
            time.sleep(pause)
            seen = len(received)
            server.send_signal(signal.SIGKILL)
            server.wait(10)
            kills += 1
            time.sleep(0.3)  # down for a while: the client backs off and retries
            server, _ = serve(data, port)
            deadline = time.monotonic() + 20
            while len(received) == seen and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(received) > seen, "no change after the restart"
        assert writer.wait(60) == 0
        deadline = time.monotonic() + 30
        while (not tokens or tokens[-1].positions != _ends(data)) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stream.close()
        reader.join(10)
        client.close()
        writer.wait(60)
        server.send_signal(signal.SIGTERM)
        assert server.wait(20) == 0
    assert not reader.is_alive() and kills == 2
    written = [(k, lsn) for k in (0, 1) for lsn in range(1, _ends(data)[k] + 1)]
    assert sorted(received) == written  # every change, none twice
    for k in (0, 1):
        assert [lsn for shard, lsn in received if shard == k] == list(range(1, _ends(data)[k] + 1))
    assert all(str(a) < str(b) for a, b in itertools.pairwise(tokens))


@pytest.mark.slow
def test_a_followed_tail_gives_up_after_retry_for_ms(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_steps(data, 2, [(0, 1, 1)])
    server, url = serve(data)
    options = ClientOptions(heartbeat_ms=200, retry_first_ms=20, retry_max_ms=50, retry_for_ms=500)
    with moonish.connect(url, options=options) as client:
        stream = client.tail("earliest", follow=True)
        assert next(stream).lsn == 1
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        started = time.monotonic()
        try:
            next(stream)
            raise AssertionError("a change from a dead server")
        except RemoteUnavailableError as error:
            assert error.kind == "unavailable" and url in str(error)
        finally:
            stream.close()
        assert 0.4 < time.monotonic() - started < 10
