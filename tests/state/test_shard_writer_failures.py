"""A ShardWriter whose append failed stops rather than keep a keyspace the log lacks; one opened
over an undecodable record fails with corruption naming it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from moonish.errors import (
    CorruptionError,
    UnavailableError,
)
from moonish.log.control import Control, store_control
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.golden import segments


def test_a_shard_writer_whose_append_failed_stops_rather_than_keep_a_keyspace_the_log_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard = tmp_path / "shard-0"
    with ShardWriter(shard, ShardOptions(expiry_sweep_ms=0)) as writer:
        writer.execute(0, ["INCR", "n"])

        def full(fd: int, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        # The disk is full (os.write, not the writer's method: compiled by mypyc, docs/build.md,
        # its classes cannot be patched).
        monkeypatch.setattr(os, "write", full)
        with pytest.raises(UnavailableError, match="the append of LSN 2 failed"):
            writer.execute(0, ["INCR", "n"])
        monkeypatch.undo()
        with pytest.raises(UnavailableError, match="stopped"):
            writer.execute(0, ["INCR", "n"])
        with pytest.raises(UnavailableError, match="stopped"):
            writer.checkpoint()
    with ShardWriter(shard, ShardOptions(expiry_sweep_ms=0)) as writer:
        assert writer.execute(0, ["INCR", "n"]).reply == 2


def test_a_shard_writer_over_an_undecodable_record_is_corruption_not_a_traceback(
    tmp_path: Path,
) -> None:
    from moonish.log.format import RecordType
    from moonish.log.frames import encode_frame

    shard = tmp_path / "shard-0"
    with ShardWriter(shard, ShardOptions(expiry_sweep_ms=0)) as writer:
        writer.execute(0, ["SET", "k", "v"])
    with open(segments(shard)[-1], "ab") as handle:
        handle.write(encode_frame(2, RecordType.KV_CHANGE, b"\x63" * 9, 5))  # bad grammar
    store_control(str(shard), Control(0, 3, True))
    with pytest.raises(CorruptionError) as info:
        ShardWriter(shard, ShardOptions(expiry_sweep_ms=0))
    assert info.value.lsn == 2 and info.value.path == str(segments(shard)[-1])
