"""The command line: output shapes, exit codes by kind, help text with examples."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import orjson
import pytest

import moonish.log.reader
from cli.main import main, moonish
from moonish.log.format import MAGIC
from tests.support.cli import MOONISH, default_sigint, run
from tests.support.golden import segments
from tests.support.paths import ROOT
from tests.support.wal import kv, open_writer

FIXTURES = ROOT / "fixtures"


@pytest.fixture
def filled(shard: Path) -> Path:
    with open_writer(shard) as writer:
        for i in range(12):
            writer.append(kv(b"key-%d" % i))
    return shard


def test_read_prints_the_cursor_then_envelopes(filled: Path) -> None:
    out = run("cdc", "read", str(filled), "0", "--limit", "5")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == b"6" and len(lines) == 6
    assert [orjson.loads(line)["source"]["lsn"] for line in lines[1:]] == [1, 2, 3, 4, 5]
    resumed = run("cdc", "read", str(filled), lines[0].decode(), "--limit", "100").stdout
    assert resumed.splitlines()[0] == b"13" and len(resumed.splitlines()) == 8


def test_read_with_nothing_new_prints_only_the_cursor(filled: Path) -> None:
    out = run("cdc", "read", str(filled), "13")
    assert (out.returncode, out.stdout) == (0, b"13\n")


def test_default_limit_is_256(shard: Path) -> None:
    with open_writer(shard) as writer:
        writer.append_batch([kv(b"k%d" % i) for i in range(300)])
    assert len(run("cdc", "read", str(shard), "0").stdout.splitlines()) == 257


@pytest.mark.parametrize(
    "args",
    [
        ["abc"],
        ["-1"],
        ["1.5"],
        ["0", "--limit", "0"],
        ["0", "--limit", "10001"],
        ["0", "--bogus"],
        ["99"],
        [],
        ["5", "--snapshot"],
        ["snapshot:x:1"],
    ],
)
def test_usage_errors_exit_2_with_one_line(filled: Path, args: list[str]) -> None:
    out = run("cdc", "read", str(filled), *args)
    assert out.returncode == 2 and out.stdout == b""
    assert len(out.stderr.decode().strip().splitlines()) == 1, out.stderr


@pytest.mark.slow
def test_checkpoint_then_snapshot_read_then_stream_and_transactions(tmp_path: Path) -> None:
    aof = FIXTURES / "redis-aof" / "slice" / "appendonlydir"
    data = tmp_path / "data"
    assert run("wal", "import-aof", str(aof), str(data), "--shards", "2").returncode == 0
    shard = data / "shard-1"
    checkpoint = [
        orjson.loads(line) for line in run("wal", "checkpoint", str(data)).stdout.splitlines()
    ]
    assert [c["lsn"] for c in checkpoint] == [
        orjson.loads(run("cdc", "info", str(data / f"shard-{k}")).stdout)["latest_lsn"] - 1
        for k in range(2)
    ]
    keys = checkpoint[1]["keys"]
    first = run("cdc", "read", str(shard), "--snapshot", "--limit", "3").stdout.splitlines()
    assert first[0] == f"snapshot:{checkpoint[1]['lsn']}:3".encode()
    rows = [orjson.loads(line) for line in first[1:]]
    assert [r["op"] for r in rows] == ["r"] * 3 and rows[0]["source"]["snapshot"] == "first"
    rest = run("cdc", "read", str(shard), first[0].decode(), "--limit", "10000").stdout
    lines = rest.splitlines()
    ops = [orjson.loads(line)["op"] for line in lines[1:]]
    assert ops == ["r"] * (keys - 3)  # the rows; the checkpoint record is passed over
    assert lines[0] == str(checkpoint[1]["lsn"] + 2).encode()
    args = ("cdc", "read", str(shard), first[0].decode(), "--limit", "10000", "--messages")
    lines = run(*args).stdout.splitlines()
    ops = [orjson.loads(line)["op"] for line in lines[1:]]
    assert ops == ["r"] * (keys - 3) + ["m"]  # the rows, then the checkpoint record
    assert lines[0] == str(checkpoint[1]["lsn"] + 2).encode()

    changed = run("wal", "stream", str(shard), "--view", "KEYS_ONLY", "--max-value-bytes", "99")
    assert orjson.loads(changed.stdout)["stream"] == {
        "enabled": True,
        "view_type": "KEYS_ONLY",
        "max_value_bytes": 99,
    }
    with_txn = run("cdc", "read", str(shard), "0", "--limit", "10000", "--transactions").stdout
    events = [orjson.loads(line) for line in with_txn.splitlines()[1:]]
    begins = [e for e in events if e.get("status") == "BEGIN"]
    ends = [e for e in events if e.get("status") == "END"]
    assert len(begins) == len(ends) >= 25
    tail = run("cdc", "tail", str(shard), "--snapshot").stdout.splitlines()
    assert len(tail) == keys
    tail = run("cdc", "tail", str(shard), "--snapshot", "--messages").stdout.splitlines()
    assert len(tail) == keys + 1


@pytest.mark.parametrize("command", [["checkpoint"], ["stream", "--view", "KEYS_ONLY"]])
def test_changing_commands_do_not_create_a_shard(tmp_path: Path, command: list[str]) -> None:
    out = run("wal", command[0], str(tmp_path), *command[1:])
    assert out.returncode == 2 and b"holds no WAL segment" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_missing_directory_exits_2(tmp_path: Path) -> None:
    out = run("cdc", "read", str(tmp_path / "missing"), "0")
    assert out.returncode == 2 and b"does not exist" in out.stderr


def test_corruption_exits_4_naming_file_offset_and_lsn() -> None:
    out = run("cdc", "read", str(FIXTURES / "wal" / "frame-checksum-mismatch"), "3")
    assert out.returncode == 4
    assert b"0000000000000001.seg" in out.stderr and b"offset 190" in out.stderr
    assert b"LSN 3" in out.stderr


def test_retention_exits_3_and_names_the_oldest_lsn(tmp_path: Path) -> None:
    shard = tmp_path / "shard-0"
    with open_writer(shard, segment_bytes=300) as writer:
        for i in range(20):
            writer.append(kv(b"key-%d" % i))
    first = sorted(shard.glob("*.seg"))[0]
    first.unlink()
    out = run("cdc", "read", str(shard), "1")
    assert out.returncode == 3 and b"oldest retained LSN is" in out.stderr


def test_unsupported_version_exits_5() -> None:
    out = run("cdc", "read", str(FIXTURES / "wal" / "unsupported-version"), "0")
    assert out.returncode == 5 and b"version 3" in out.stderr


def test_locked_shard_exits_6(tmp_path: Path) -> None:
    aof = FIXTURES / "redis-aof" / "slice" / "appendonlydir"
    with open_writer(tmp_path / "data" / "shard-0"):
        out = run("wal", "import-aof", str(aof), str(tmp_path / "data"), "--shards", "1")
    assert out.returncode == 6 and b"locked" in out.stderr


def test_tail_prints_ndjson_to_the_end(filled: Path) -> None:
    out = run("cdc", "tail", str(filled), "--from-lsn", "10")
    assert [orjson.loads(x)["source"]["lsn"] for x in out.stdout.splitlines()] == [10, 11, 12]


def test_tail_follow_prints_new_records_and_ctrl_c_exits_cleanly(filled: Path) -> None:
    with subprocess.Popen(
        [*MOONISH, "cdc", "tail", str(filled), "--from-lsn", "12", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert orjson.loads(proc.stdout.readline())["source"]["lsn"] == 12
            with open_writer(filled) as writer:
                writer.append(kv(b"late"))
            assert orjson.loads(proc.stdout.readline())["after"]["key"] == "late"
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=10)
            assert proc.returncode == 0 and b"Traceback" not in err
        finally:
            if proc.poll() is None:  # a failed assertion must not leave the test waiting
                proc.kill()


@pytest.mark.slow
def test_info_and_verify_and_dump(tmp_path: Path) -> None:
    aof = FIXTURES / "redis-aof" / "slice" / "appendonlydir"
    imported = run("wal", "import-aof", str(aof), str(tmp_path / "data"), "--shards", "2")
    assert imported.returncode == 0, imported.stderr
    summary = orjson.loads(imported.stdout)
    assert summary["records"] == sum(summary["per_shard"]) and summary["transactions"] == 50

    facts = orjson.loads(run("cdc", "info", str(tmp_path / "data" / "shard-1")).stdout)
    assert facts["latest_lsn"] == summary["per_shard"][1] and facts["oldest_lsn"] == 1
    assert facts["segments"] == 1 and facts["bytes"] > 0
    both = orjson.loads(run("cdc", "info", str(tmp_path / "data")).stdout)
    assert [s["shard"] for s in both["shards"]] == [0, 1]

    verified = run("wal", "verify", str(tmp_path / "data"))
    assert verified.returncode == 0 and verified.stdout.count(b"ok ") == 2

    dump = run("wal", "dump", str(tmp_path / "data" / "shard-0"), "--from-lsn", "3", "--limit", "2")
    lines = dump.stdout.decode().splitlines()
    assert len(lines) == 2 and lines[0].startswith("lsn: 3, segment: 0000000000000001.seg")


def test_verify_fails_with_the_damage() -> None:
    damaged = FIXTURES / "wal" / "sealed-segment-truncated"
    out = run("wal", "verify", str(damaged))
    assert out.returncode == 4 and b"0000000000000001.seg" in out.stderr


def test_verify_accepts_a_torn_tail_and_reports_it(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "wal" / "torn-tail", tmp_path / "torn")
    out = run("wal", "verify", str(tmp_path / "torn"))
    assert out.returncode == 0 and b"torn tail of" in out.stdout


def commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    """Every group and command under ``group``, as ``moonish --help`` lists them (commands load
    lazily: click's ``list_commands`` and ``get_command``, not ``group.commands``)."""
    found: list[tuple[str, click.Command]] = [(prefix or "moonish", group)]
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            found += commands(command, f"{prefix} {name}".strip())
        else:
            found.append((f"{prefix} {name}".strip(), command))
    return found


@pytest.mark.parametrize(("name", "command"), commands(moonish))
def test_every_command_is_documented_with_an_example(name: str, command: click.Command) -> None:
    assert command.help and "Example:" in command.help, name
    assert "moonish " in command.help.split("Example:")[1], name
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in ("help", "version"):
            assert param.help, f"{name} --{param.name}"


def test_main_returns_exit_codes_in_process(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cdc", "read", str(filled), "0", "--limit", "1"]) == 0
    assert main(["cdc", "read", str(filled), "nope"]) == 2
    assert "moonish: usage:" in capsys.readouterr().err


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "moonish"
    assert script.exists()
    out = subprocess.run([str(script), "--version"], capture_output=True, timeout=30, check=False)
    assert out.returncode == 0 and b"moonish" in out.stdout
    assert os.access(script, os.X_OK)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-1"], b"non-negative integer LSN below 2**64, got '-1'"),
        (["abc"], b"non-negative integer LSN below 2**64, got 'abc'"),
        (["1" * 5000], b"got '11111111111111111111'... (5000 characters)"),
        (["18446744073709551616"], b"must be between 0 and 18446744073709551615"),
        (["0", "--limit", "0"], b"0 is not in the range 1<=x<=10000"),
        (["99"], b"beyond the end of the log; the next LSN is 13"),
    ],
)
def test_usage_errors_say_what_is_wrong(filled: Path, args: list[str], says: bytes) -> None:
    out = run("cdc", "read", str(filled), *args)
    assert out.returncode == 2 and says in out.stderr, out.stderr


def test_dump_prints_exact_commit_microseconds() -> None:
    out = run("wal", "dump", str(FIXTURES / "wal" / "mixed-records"), "--limit", "1")
    commit_us = (
        1_795_000_000_001_000  # tests/support/golden.py: START_US, then a 1 ms step per read
    )
    seconds, micros = divmod(commit_us, 1_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"
    assert out.returncode == 0 and f"commit: {stamp}," in out.stdout.decode()


def test_cdc_tail_prints_every_record_before_the_damage_then_exits_4(shard: Path) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(60):
            writer.append(kv(b"key-%d" % i))
    damaged = segments(shard)[3]
    data = bytearray(damaged.read_bytes())
    data[: len(MAGIC)] = b"NOTAWAL\x00"
    damaged.write_bytes(bytes(data))
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "cdc", "tail", str(shard)],
        capture_output=True,
        check=False,
    )
    assert run.returncode == 4, run.stderr
    assert len(run.stdout.splitlines()) == int(damaged.stem, 16) - 1
    assert str(damaged).encode() in run.stderr
