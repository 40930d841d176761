"""``moonish cdc read|tail <URL>``: the output of the local commands (first line, cursor
files, consumers and acks, markers), bearer tokens from --token-file, TLS with --cacert, and
exit codes by kind."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from cli.consumer.output import HEADER
from moonish.datadir import consumers
from moonish.serve import ServeOptions
from tests.support.cli import MOONISH, default_sigint, run
from tests.support.servers.serve_util import TOKEN, Running, certificate, same
from tests.support.steps import write_steps


def lines(out: bytes) -> list[object]:
    """Output lines, envelopes without their processing time."""
    return [same(line) if line.startswith(b"{") else line for line in out.splitlines()]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_steps(tmp_path / "data", 2, [(n % 2, 1 + 2 * (n % 5 == 0), 1) for n in range(25)])
    return tmp_path / "data"


@pytest.mark.slow
def test_read_by_url_prints_what_read_by_directory_prints(data: Path, tmp_path: Path) -> None:
    with Running(data) as server:
        for args in (["earliest", "--limit", "7"], ["now"], ["m2.a3.a2", "--limit", "1000"]):
            local, remote = (
                run("cdc", "read", str(data), *args),
                run("cdc", "read", server.url, *args),
            )
            assert (remote.returncode, lines(remote.stdout)) == (0, lines(local.stdout))
        token = run("cdc", "read", server.url, "earliest", "--limit", "3").stdout.split(b"\n")[0]
        assert run("cdc", "read", str(data), "earliest", "--limit", "3").stdout.startswith(token)
        pos_local, pos_remote = tmp_path / "local.pos", tmp_path / "remote.pos"
        local = run("cdc", "read", str(data), "earliest", "--cursor-file", str(pos_local))
        remote = run(
            "cdc", "read", server.url + "/v1/changes", "earliest", "--cursor-file", str(pos_remote)
        )
        assert lines(remote.stdout) == lines(local.stdout)
        assert pos_remote.read_bytes() == pos_local.read_bytes()


@pytest.mark.slow
def test_tail_and_consumers_by_url(data: Path) -> None:
    consumers.create(data, "local", (0, 0))
    consumers.create(data, "remote", (0, 0))
    with Running(data) as server:
        local = run("cdc", "tail", str(data), "--from", "m2.a5.a4")
        remote = run("cdc", "tail", server.url, "--from", "m2.a5.a4")
        assert remote.returncode == 0 and lines(remote.stdout) == lines(local.stdout)
        for name, where in (("local", str(data)), ("remote", server.url)):
            done = run("cdc", "read", where, "--consumer", name, "--ack", "--limit", "5")
            assert done.returncode == 0
        assert consumers.load(data, "remote").positions == consumers.load(data, "local").positions
        local = run("cdc", "tail", str(data), "--consumer", "local", "--ack")
        remote = run("cdc", "tail", server.url, "--consumer", "remote", "--ack")
        assert lines(remote.stdout) == lines(local.stdout)
        assert consumers.load(data, "remote").positions == consumers.load(data, "local").positions
        assert run("cdc", "read", server.url, "--consumer", "nobody").returncode == 2


@pytest.mark.slow
def test_tail_follow_by_url_prints_new_changes_and_stops_on_sigint(data: Path) -> None:
    with Running(data) as server:
        cursor = data.parent / "pos"
        process = subprocess.Popen(
            [
                *MOONISH,
                "cdc",
                "tail",
                server.url,
                "--from",
                "now",
                "--follow",
                "--resolved-ms",
                "50",
                "--cursor-file",
                str(cursor),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=default_sigint,
        )
        time.sleep(1.5)
        before = run("cdc", "read", str(data), "now").stdout.strip().decode()
        write_steps(data, 2, [(0, 1, 1), (1, 2, 1)])
        deadline = time.monotonic() + 20
        end = run("cdc", "read", str(data), "now").stdout.strip()
        while time.monotonic() < deadline and (
            not cursor.exists() or cursor.read_bytes().strip() != end
        ):
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
        assert process.returncode == 0, err
        rows = [orjson.loads(line) for line in out.splitlines()]
        changes = [(r["source"]["shard"], r["source"]["lsn"]) for r in rows if "source" in r]
        after = run("cdc", "read", str(data), before).stdout.splitlines()[1:]
        assert sorted(changes) == sorted(
            (e["source"]["shard"], e["source"]["lsn"]) for e in map(orjson.loads, after)
        )
        assert len(changes) == 3
        assert any("resolved" in r for r in rows) and cursor.read_bytes().strip() == end


@pytest.mark.slow
def test_token_file_tls_and_exit_codes(data: Path, tmp_path: Path) -> None:
    cert, key = certificate(tmp_path)
    token_file, wrong = tmp_path / "token", tmp_path / "wrong"
    token_file.write_text(TOKEN + "\n")
    wrong.write_text("not-the-token-0123456789\n")
    options = ServeOptions(port=0, token=TOKEN, tls_cert=str(cert), tls_key=str(key))
    with Running(data, options) as server:
        secure = ["--token-file", str(token_file), "--cacert", str(cert)]
        local = run("cdc", "read", str(data), "earliest", "--limit", "4")
        remote = run("cdc", "read", server.url, "earliest", "--limit", "4", *secure)
        assert remote.returncode == 0 and lines(remote.stdout) == lines(local.stdout)
        tail = run("cdc", "tail", server.url, *secure)
        assert lines(tail.stdout) == lines(run("cdc", "tail", str(data)).stdout)
        for args, code, words in [
            (["--cacert", str(cert)], 2, b"bearer token"),  # no token
            (["--token-file", str(wrong), "--cacert", str(cert)], 2, b"bearer token"),
            (["--token-file", str(token_file)], 2, b"TLS"),  # a certificate nobody trusts
            ([*secure, "--name", "x"], 2, b"--name reads a log on this machine"),
            ([*secure, "--limit", "0"], 2, b"--limit"),
        ]:
            done = run("cdc", "read", server.url, "earliest", *args)
            assert done.returncode == code and words in done.stderr, done.stderr
        assert run("cdc", "read", server.url, "m3.a0.a0.a0", *secure).returncode == 2
        url = server.url
    with socket.socket() as held:  # bound, never listening: refused, and no one else's
        held.bind(("127.0.0.1", 0))
        gone = run("cdc", "read", f"https://127.0.0.1:{held.getsockname()[1]}", "earliest", *secure)
    assert gone.returncode == 6 and b"unavailable" in gone.stderr
    assert (
        run("cdc", "read", str(data), "earliest", "--token-file", str(token_file)).returncode == 2
    )
    assert run("cdc", "tail", url, "--from-lsn", "3").returncode == 2


@pytest.mark.slow
def test_consumer_commands_and_info_by_url(data: Path) -> None:
    """`consumer create|list|show|ack|seek|drop` and `cdc info` take a URL too, and do what
    they do on the directory."""

    def json_lines(out: bytes) -> list[dict[str, object]]:
        docs = [orjson.loads(line) for line in out.splitlines()]
        for doc in docs:  # times differ between two calls
            for field in ("created_ms", "updated_ms"):
                doc.pop(field, None)
            for shard in doc.get("shards", []):
                shard.pop("oldest_unconfirmed_age_ms")
        return docs

    with Running(data) as server:
        for name, where in (("local", str(data)), ("remote", server.url)):
            made = run("consumer", "create", where, name, "--from", "earliest")
            assert made.returncode == 0, made.stderr
            assert run("consumer", "ack", where, name, "m2.a3.a2").returncode == 0
        shown = {
            name: json_lines(run("consumer", "show", where, name, "--json").stdout)
            for name, where in (("local", str(data)), ("remote", server.url))
        }
        for doc in shown["remote"]:
            doc["name"] = "local"
        assert shown["remote"] == shown["local"]
        table = run("consumer", "list", server.url).stdout.decode()
        assert tuple(table.splitlines()[0].split()) == HEADER
        assert table.count("remote ") == 2 and table.count("local ") == 2  # one row per shard
        moved = run("consumer", "seek", server.url, "remote", "earliest")
        assert orjson.loads(moved.stdout) == {"name": "remote", "token": "m2.a0.a0"}
        assert consumers.load(data, "remote").positions == (0, 0)
        info = orjson.loads(run("cdc", "info", server.url).stdout)
        assert [shard["shard"] for shard in info["shards"]] == [0, 1]
        assert {entry["name"] for entry in info["consumers"]} == {"local", "remote"}
        dropped = run("consumer", "drop", server.url, "remote")
        assert orjson.loads(dropped.stdout) == {"name": "remote", "dropped": True}
        assert [c.name for c in consumers.list_consumers(data)] == ["local"]
        assert run("consumer", "show", server.url, "remote").returncode == 2  # no such one
        assert run("consumer", "list", str(data), "--token-file", str(data)).returncode == 2
