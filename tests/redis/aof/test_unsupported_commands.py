"""A command moonish does not implement (a module's) in an AOF: by default an error naming the
command, the file and its byte offset (also inside MULTI/EXEC, also without a key); with
``--skip-unsupported`` / ``skip_unsupported=True`` a ``moonish.skipped`` message record holding
the command as RESP, on the shard of its first argument (every shard without one), counted
by name in the report."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import orjson
import pytest

from moonish.errors import UnsupportedFormatError
from moonish.redis.aof.importer import import_aof
from moonish.slots import shard_of_key
from tests.support.cli import MOONISH
from tests.support.paths import ROOT
from tests.support.redis.aof import INCR, all_envelopes, copy_aof, resp

SET = resp(b"SET", b"k", b"v")
MODULE = resp(b"JSON.SET", b"doc", b"$", b'{"a":1}')
KEYLESS = resp(b"MODULE.PING")
TRANSACTION = resp(b"MULTI") + resp(b"SET", b"doc", b"1") + MODULE + resp(b"EXEC")
AOF = SET + MODULE + resp(b"SELECT", b"4") + KEYLESS + TRANSACTION
SELECT = resp(b"SELECT", b"4")


@pytest.mark.parametrize(
    ("data", "command", "offset"),
    [
        (SET + MODULE, "JSON.SET", len(SET)),
        (SET + SELECT + KEYLESS, "MODULE.PING", len(SET + SELECT)),
        (TRANSACTION, "JSON.SET", TRANSACTION.index(MODULE)),  # the command's, not MULTI's
    ],
)
def test_by_default_an_unsupported_command_is_an_error_naming_file_and_offset(
    tmp_path: Path, data: bytes, command: str, offset: int
) -> None:
    aof = copy_aof(tmp_path, data)
    with pytest.raises(UnsupportedFormatError) as info:
        import_aof(aof, tmp_path / "data", 2)
    error = info.value
    assert (error.path, error.offset) == (str(aof / INCR), offset)
    assert f"'{command}'" in error.message and "--skip-unsupported" in error.message


def test_skipped_commands_become_message_records_on_their_shards(tmp_path: Path) -> None:
    aof = copy_aof(tmp_path, AOF)
    report = import_aof(aof, tmp_path / "data", 3, skip_unsupported=True)
    assert dict(report.skipped) == {"JSON.SET": 2, "MODULE.PING": 1}
    assert report.per_command["SET"] == 2 and "JSON.SET" not in report.per_command
    envelopes = all_envelopes(tmp_path / "data", 3)
    skipped = [
        (shard, e)
        for shard, es in enumerate(envelopes)
        for e in es
        if e["op"] == "m" and e["message"]["prefix"] == "moonish.skipped"
    ]
    found = [
        (shard, e["source"]["db"], base64.b64decode(e["message"]["content"]))
        for shard, e in skipped
    ]
    doc = shard_of_key(b"doc", 3)
    assert sorted(found) == sorted(
        [(doc, 0, MODULE), (0, 4, KEYLESS), (1, 4, KEYLESS), (2, 4, KEYLESS), (doc, 4, MODULE)]
    )
    in_transaction = [e for shard, e in skipped if e["source"]["db"] == 4 and shard == doc]
    in_transaction = [e for e in in_transaction if e["transaction"] is not None]
    assert len(in_transaction) == 1  # in the MULTI's batch, after the SET of doc
    assert in_transaction[0]["transaction"]["total_order"] == 2


@pytest.mark.slow
def test_cli_skip_unsupported_counts_them(tmp_path: Path) -> None:
    aof = copy_aof(tmp_path, AOF)
    refused = subprocess.run(
        [*MOONISH, "wal", "import-aof", str(aof), str(tmp_path / "a"), "--shards", "2"],
        capture_output=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert refused.returncode == 5
    assert f"{aof / INCR}, offset {len(SET)}" in refused.stderr.decode()
    assert "'JSON.SET'" in refused.stderr.decode()
    done = subprocess.run(
        [
            *MOONISH,
            "wal",
            "import-aof",
            str(aof),
            str(tmp_path / "b"),
            "--shards",
            "2",
            "--skip-unsupported",
        ],
        capture_output=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    summary = orjson.loads(done.stdout)
    assert summary["skipped"] == {"JSON.SET": 2, "MODULE.PING": 1}
    assert summary["per_command"] == {"SET": 2}
