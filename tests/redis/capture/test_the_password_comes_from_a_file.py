"""``wal capture --password-file``: the master's password read from a file, never on the command
line (``ps`` shows the capture's arguments), against a redis-server with ``requirepass``; a
URL that has a password already is refused rather than silently overridden."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import redis

from moonish.errors import InvalidArgumentError
from moonish.redis.replication.messages import with_password
from tests.support.cli import MOONISH, run
from tests.support.paths import ROOT
from tests.support.redis.capture import our_state, redis_state, url_of, wait_for
from tests.support.servers.redis_server import redis_server

pytestmark = pytest.mark.redis

SECRET = "s3cr:et@/%"


def test_a_capture_authenticates_with_the_password_in_a_file(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    secret = tmp_path / "password"
    secret.write_text(SECRET + "\n")
    with redis_server(tmp_path / "redis") as unauthenticated:
        unauthenticated.config_set("requirepass", SECRET)
        port = unauthenticated.connection_pool.connection_kwargs["port"]
        client = redis.Redis(host="127.0.0.1", port=port, password=SECRET)
        client.set("before", 1)
        data = tmp_path / "data"
        args = ["wal", "capture", url_of(client), str(data), "--shards", "2"]
        capture = subprocess.Popen(
            [*MOONISH, *args, "--password-file", str(secret), "--quiet"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            cmdline = Path(f"/proc/{capture.pid}/cmdline").read_bytes()
            assert SECRET.encode() not in cmdline
            wait_for(lambda: (data / "capture.json").exists(), "the capture's first sync", 60)
            client.set("after", 2)
            wait_for(
                lambda: (
                    int(client.info("replication")["slave0"]["offset"])
                    >= int(client.info("replication")["master_repl_offset"])
                ),
                "the capture to acknowledge",
                60,
            )
        finally:
            capture.send_signal(signal.SIGTERM)
            _, err = capture.communicate(timeout=60)
        assert capture.returncode == 0, err
        bad = tmp_path / "bad"
        bad.write_text("wrong\n")
        refused = run(*args, "--password-file", str(bad), "--shards", "2")
        assert refused.returncode == 2 and b"WRONGPASS" in refused.stderr
        client.config_set("requirepass", "")  # (the comparison's clients have no password)
        client.close()
        assert our_state(data) == redis_state(unauthenticated, (0,))


def test_a_url_with_a_password_and_a_password_file_is_refused() -> None:
    assert with_password("redis://u@h:1", "p") == "redis://u:p@h:1"
    with pytest.raises(InvalidArgumentError, match="has a password already"):
        with_password("redis://:x@h:1", "p")
