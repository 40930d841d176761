"""HSETEX and HGETDEL as Valkey 9 and Redis 8 propagate them, applied as an AOF load or a
replica applies them (``loading``: a past time is set, not acted on), and a refused HSETEX,
HGETEX or HGETDEL changing nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from moonish.errors import CommandError
from moonish.state.shard import ShardWriter
from tests.support.redis.hash_ttls import FAR, PAST, our_hash
from tests.support.servers.redis_server import shard_writer


def _load(writer: ShardWriter, *argv: str) -> Any:
    now_us = 1_700_000_000_000_000
    prepared = writer.prepare(0, [a.encode() for a in argv], now_us, loading=True)
    writer.append(prepared.records, False, now_us)
    if isinstance(prepared.reply, CommandError):
        raise prepared.reply
    return prepared.reply


def test_propagated_forms_apply_while_loading(tmp_path: Path) -> None:
    """What Valkey 9 and Redis 8 write to a replica or an AOF, applied as an AOF load applies it
    (a past time is set, not acted on): Valkey's HSETEX with PXAT, KEEPTTL or nothing, its
    HGETDEL; Redis 8's HSETEX with FNX/FXX and its HINCRBYFLOAT (``HSETEX key KEEPTTL FIELDS 1
    field value``, which keeps the field's time)."""
    with shard_writer(tmp_path / "shard") as writer:
        assert _load(writer, "HSETEX", "h", "PXAT", FAR, "FIELDS", "2", "a", "1", "b", "2") == 1
        assert _load(writer, "HSETEX", "h", "KEEPTTL", "FIELDS", "1", "a", "1.5") == 1
        assert _load(writer, "HSETEX", "h", "PXAT", PAST, "FIELDS", "1", "c", "3") == 1
        assert our_hash(writer.keyspace.get(0, b"h")) == (
            "hash",
            {b"a": b"1.5", b"b": b"2", b"c": b"3"},
            -1,
            {b"a": int(FAR), b"b": int(FAR), b"c": int(PAST)},
        )
        # c's time has passed: FNX finds it missing, FXX fails on it (Redis 8 while loading)
        assert _load(writer, "HSETEX", "h", "FXX", "FIELDS", "1", "c", "4") == 0
        assert _load(writer, "HSETEX", "h", "FNX", "FIELDS", "1", "c", "4") == 1
        assert _load(writer, "HGETDEL", "h", "FIELDS", "3", "a", "zz", "c") == [b"1.5", None, b"4"]
        assert _load(writer, "HGETDEL", "h", "FIELDS", "1", "b") == [b"2"]
        assert writer.keyspace.get(0, b"h") is None


def test_valkey_field_times_past_redis_limit_apply_while_loading(tmp_path: Path) -> None:
    """Valkey 9 takes field times up to 2^63 - 1 ms (Redis 7.4 and 8 stop at 2^46 - 1) and
    propagates them in HSETEX and, for HGETEX, in HPEXPIREAT: both apply while loading."""
    latest = str(2**63 - 1)
    with shard_writer(tmp_path / "shard") as writer:
        assert _load(writer, "HSETEX", "h", "PXAT", latest, "FIELDS", "2", "a", "1", "b", "2") == 1
        assert _load(writer, "HPEXPIREAT", "h", str(2**63 - 2), "FIELDS", "1", "b") == [1]
        entry = writer.keyspace.get(0, b"h")
        assert entry is not None
        assert entry.field_expire_at_ms == {b"a": 2**63 - 1, b"b": 2**63 - 2}
        with pytest.raises(CommandError, match="invalid expire time"):
            writer.execute(0, ["HPEXPIREAT", "h", str(2**46), "FIELDS", "1", "b"])


def test_a_refused_command_changes_nothing(tmp_path: Path) -> None:
    with shard_writer(tmp_path / "shard") as writer:
        writer.execute(0, ["HSET", "h", "a", "1"])
        before = our_hash(writer.keyspace.get(0, b"h"))
        for argv in (
            ["HSETEX", "h", "FNX", "EX", "-1", "FIELDS", "1", "b", "1"],
            ["HGETEX", "h", "EX", "-1", "FIELDS", "1", "a"],
            ["HGETDEL", "h", "FIELDS", "2", "a"],
        ):
            with pytest.raises(CommandError):
                writer.execute(0, argv)
        assert our_hash(writer.keyspace.get(0, b"h")) == before
