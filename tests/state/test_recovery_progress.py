"""A writer that opens reports how far it has rebuilt its keyspace (``ShardOptions.on_recovery``:
after its snapshot, then after every batch of records replayed), and what that callback raises
stops the opening at once, with the shard's lock released and nothing written."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.rebuild import REPLAY_BATCH_RECORDS
from moonish.state.shard import ShardOptions, ShardWriter


def _options(**more: object) -> ShardOptions:
    return ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER),
        expiry_sweep_ms=0,
        snapshots=SnapshotPolicy.off(),
        **more,  # type: ignore[arg-type]
    )


def _fill(shard: Path, commands: int, checkpoint_at: int | None = None) -> int:
    with ShardWriter(shard, _options()) as writer:
        for i in range(commands):
            writer.execute(0, [b"INCR", b"counter%d" % (i % 7)])
            if i + 1 == checkpoint_at:
                writer.checkpoint()
        return writer.next_lsn - 1


class Stop(Exception):
    pass


def test_progress_after_the_snapshot_and_every_batch(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    last = _fill(shard, 3 * REPLAY_BATCH_RECORDS, checkpoint_at=1000)
    calls: list[tuple[int, int]] = []
    with ShardWriter(shard, _options(on_recovery=lambda *c: calls.append(c))) as writer:
        assert writer.keyspace.get(0, b"counter0") is not None
    snapshot_lsn = 1000  # one record per INCR: the checkpoint covers LSNs 1..1000
    assert calls[0] == (snapshot_lsn, last)
    assert calls[-1] == (last, last)
    done = [lsn for lsn, _ in calls]
    assert done == sorted(done) and len(calls) >= 3
    assert all(b - a <= REPLAY_BATCH_RECORDS for a, b in itertools.pairwise(done))


def test_what_the_callback_raises_stops_the_opening_and_releases_the_lock(
    tmp_path: Path,
) -> None:
    shard = tmp_path / "shard"
    last = _fill(shard, 2 * REPLAY_BATCH_RECORDS)
    seen: list[int] = []

    def stop_after_one_batch(lsn: int, last_lsn: int) -> None:
        seen.append(lsn)
        if lsn > 0:
            raise Stop

    with pytest.raises(Stop):
        ShardWriter(shard, _options(on_recovery=stop_after_one_batch))
    assert seen == [0, REPLAY_BATCH_RECORDS]  # none after the one that raised
    with ShardWriter(shard, _options()) as writer:  # the lock was released; nothing written
        assert writer.next_lsn - 1 == last
