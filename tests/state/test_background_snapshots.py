"""A writer takes snapshots on its own (moonish.state.autosnapshot): by records, bytes and
time, written by a forked child while appends go on, each followed by its checkpoint record;
a reopened writer starts from the newest; a failed or killed child loses nothing and leaves
nothing half-written; the child never holds the shard's lock."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from moonish.errors import InvalidArgumentError
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.autosnapshot import CHECK_EVERY_APPENDS, SnapshotPolicy
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.state.snapshot import list_snapshots, read_snapshot, snapshot_path
from tests.support.wal import checkpoints


def _writer(shard: Path, policy: SnapshotPolicy) -> ShardWriter:
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0, snapshots=policy
    )
    return ShardWriter(shard, options)


def _state(writer: ShardWriter) -> dict[tuple[int, bytes], object]:
    return {(db, key): list(entry.value) for db, key, entry in writer.keyspace.items()}


def test_snapshots_by_records_then_a_reopened_writer_starts_from_the_newest(
    tmp_path: Path,
) -> None:
    shard = tmp_path / "shard"
    with _writer(shard, SnapshotPolicy(every_records=400, every_bytes=0, every_s=0)) as writer:
        for i in range(3000):
            writer.execute(0, [b"RPUSH", b"list%d" % (i % 50), b"e%d" % i])
            if i % 100 == 99:  # each child done before the next rule is due, however fast
                writer.wait_snapshot()
        assert writer.snapshots.error is None and writer.snapshots.taken >= 6
        state, last_lsn = _state(writer), writer.next_lsn - 1
    marks = checkpoints(shard)
    assert [mark.label for mark in marks] == ["auto:records"] * len(marks)
    newest = list_snapshots(str(shard))
    assert len(newest) == 2  # the two newest are kept
    assert newest[-1] == marks[-1].checkpoint_lsn
    assert last_lsn - newest[-1] <= 400 + CHECK_EVERY_APPENDS + len(marks)
    with _writer(shard, SnapshotPolicy.off()) as reopened:
        assert _state(reopened) == state


def test_a_snapshot_holds_the_keyspace_at_its_lsn_while_appends_go_on(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    with _writer(shard, SnapshotPolicy.off()) as writer:
        for i in range(200):
            writer.execute(0, [b"SET", b"k%d" % i, b"before"])
        running = writer.snapshot_in_background()
        lsn = writer.next_lsn - 1
        assert running.lsn == lsn and running.pause_s < 5
        for i in range(200):
            writer.execute(0, [b"SET", b"k%d" % i, b"after"])
        writer.wait_snapshot()  # (the appends may have seen it end already)
        assert running.error is None and writer.snapshots.running is None
    snapshot = read_snapshot(snapshot_path(str(shard), lsn))
    values = {orjson.loads(line)["value"] for line in snapshot.images}
    assert values == {"before"} and len(snapshot.images) == 200
    assert [(mark.checkpoint_lsn, mark.label) for mark in checkpoints(shard)] == [
        (lsn, "auto:asked")
    ]


def test_a_failed_snapshot_is_reported_and_loses_nothing(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    with _writer(shard, SnapshotPolicy.off()) as writer:
        writer.execute(0, [b"SET", b"k", b"v"])
        os.mkdir(snapshot_path(str(shard), writer.next_lsn - 1))  # the rename cannot replace it
        writer.snapshot_in_background()
        failed = writer.wait_snapshot()
        assert failed is not None and failed.error is not None
        assert "Directory" in failed.error or "directory" in failed.error
        assert writer.snapshots.error == failed.error
        writer.execute(0, [b"SET", b"k", b"w"])
    assert checkpoints(shard) == []
    os.rmdir(snapshot_path(str(shard), 1))
    with _writer(shard, SnapshotPolicy.off()) as reopened:
        entry = reopened.keyspace.get(0, b"k")
        assert entry is not None and entry.value == b"w"


def test_the_child_syncs_the_log_and_the_writer_does_not_wait_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting a snapshot syncs nothing in the writer's process (its pause is the fork); the
    child syncs the log's segment before it writes the snapshot."""
    shard, synced = tmp_path / "shard", tmp_path / "synced"
    writer_pid, real = os.getpid(), os.fdatasync

    def fdatasync(fd: int) -> None:
        with open(synced, "a") as out:
            out.write(f"{os.getpid()} {os.readlink(f'/proc/self/fd/{fd}')}\n")
        real(fd)

    with _writer(shard, SnapshotPolicy.off()) as writer:
        writer.execute(0, [b"SET", b"k", b"v"])
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        running = writer.snapshot_in_background()
        assert writer.wait_snapshot() is running and running.error is None
        monkeypatch.undo()
    (line,) = synced.read_text().splitlines()
    pid, path = line.split(" ", 1)
    assert int(pid) == running.pid != writer_pid
    assert path.endswith(".seg")
    assert list_snapshots(str(shard)) == [running.lsn]


def test_a_snapshot_whose_log_sync_fails_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard = tmp_path / "shard"
    writer_pid, real = os.getpid(), os.fdatasync

    def fdatasync(fd: int) -> None:
        if os.getpid() != writer_pid:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    with _writer(shard, SnapshotPolicy.off()) as writer:
        writer.execute(0, [b"SET", b"k", b"v"])
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        writer.snapshot_in_background()
        failed = writer.wait_snapshot()
        monkeypatch.undo()
        assert failed is not None and failed.error is not None
        assert "could not be synced up to LSN 1" in failed.error
        writer.execute(0, [b"SET", b"k", b"w"])
    assert list_snapshots(str(shard)) == []
    assert checkpoints(shard) == []


def test_closing_kills_a_running_snapshot_and_leaves_no_file(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    writer = _writer(shard, SnapshotPolicy.off())
    writer.execute(0, [b"SET", b"k", b"v"])
    running = writer.snapshot_in_background()
    os.kill(running.pid, signal.SIGSTOP)  # still running when the writer closes
    writer.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(running.pid, os.WNOHANG)  # reaped
    assert [p.name for p in shard.iterdir() if "snap" in p.name] == []
    assert checkpoints(shard) == []


@pytest.mark.slow
def test_the_child_does_not_hold_the_shard_lock(tmp_path: Path) -> None:
    """A writer process killed while its snapshot child runs: a new writer opens at once."""
    shard = tmp_path / "shard"
    script = (
        "import os, signal, sys, time\n"
        "from pathlib import Path\n"
        "from moonish.state.autosnapshot import SnapshotPolicy\n"
        "from tests.state.test_background_snapshots import _writer\n"
        "shard = Path(sys.argv[1])\n"
        "w = _writer(shard, SnapshotPolicy.off())\n"
        "w.execute(0, [b'SET', b'k0', b'x' * 2**27])\n"  # a child that takes a while
        "child = w.snapshot_in_background()\n"
        "lock = os.path.realpath(shard / 'LOCK')\n"
        "fds = f'/proc/{child.pid}/fd'\n"
        "def holds():\n"
        "    for fd in os.listdir(fds):\n"
        "        try:\n"
        "            if os.readlink(f'{fds}/{fd}') == lock:\n"
        "                return True\n"
        "        except FileNotFoundError:\n"  # closed meanwhile
        "            pass\n"
        "    return False\n"
        "while holds():\n"
        "    time.sleep(0.001)\n"  # until the child has closed what it inherited
        "os.kill(child.pid, signal.SIGSTOP)\n"
        "print(child.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = tmp_path / "out"
    with out.open("wb") as stdout:
        subprocess.run(
            [sys.executable, "-c", script, str(shard)],
            stdout=stdout,
            cwd=Path(__file__).parents[2],
            timeout=120,
            check=False,
        )
    child = int(out.read_text())
    try:
        assert os.path.exists(f"/proc/{child}")  # stopped, not ended
        with _writer(shard, SnapshotPolicy.off()) as writer:  # no WriterLockedError
            assert writer.keyspace.get(0, b"k0") is not None
    finally:
        os.kill(child, signal.SIGKILL)


def test_the_policy_rules() -> None:
    policy = SnapshotPolicy(every_records=100, every_bytes=1000, every_s=60)
    assert policy.due(99, 999, 59.0, 10) is None
    assert policy.due(100, 0, 0.0, 10) == "records"
    assert policy.due(100, 0, 0.0, 500) is None  # at most once per keyspace's worth of records
    assert policy.due(500, 0, 0.0, 500) == "records"
    assert policy.due(1, 1000, 0.0, 10) == "bytes"
    assert policy.due(1, 0, 60.0, 10) == "time"
    assert policy.due(0, 0, 600.0, 10) is None  # nothing new: no snapshot by time
    assert SnapshotPolicy.off().due(10**9, 10**12, 10**6, 0) is None
    assert not SnapshotPolicy.off().enabled
    with pytest.raises(InvalidArgumentError):
        SnapshotPolicy(every_records=-1)


def test_a_checkpoint_while_a_child_writes_the_same_lsn_waits_for_it(tmp_path: Path) -> None:
    """Both would write the same file through the same temporary name: the checkpoint lets
    the child finish first (its checkpoint record then moves the checkpoint's LSN on)."""
    shard = tmp_path / "shard"
    with _writer(shard, SnapshotPolicy.off()) as writer:
        for i in range(2000):
            writer.execute(0, [b"SET", b"k%d" % i, b"v" * 100])
        running = writer.snapshot_in_background()
        path, lsn = writer.checkpoint()
        assert running.finished and running.error is None and lsn == running.lsn + 1
    assert len(read_snapshot(path).images) == len(read_snapshot(running.path).images) == 2000
    assert [c.checkpoint_lsn for c in checkpoints(shard)] == [running.lsn, lsn]


def _close_rule(on_close_records: int) -> SnapshotPolicy:
    return SnapshotPolicy(
        every_records=0, every_bytes=0, every_s=0, on_close_records=on_close_records
    )


def test_a_clean_close_writes_a_snapshot_and_the_next_open_replays_only_its_checkpoint(
    tmp_path: Path,
) -> None:
    shard = tmp_path / "shard"
    with _writer(shard, _close_rule(100)) as writer:
        for i in range(200):
            writer.execute(0, [b"SET", b"k%d" % (i % 10), b"v%d" % i])
        state = _state(writer)
    assert list_snapshots(str(shard)) == [200]
    assert [mark.checkpoint_lsn for mark in checkpoints(shard)] == [200]
    calls: list[tuple[int, int]] = []
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER),
        expiry_sweep_ms=0,
        snapshots=_close_rule(100),
        on_recovery=lambda *c: calls.append(c),
    )
    with ShardWriter(shard, options) as reopened:
        assert _state(reopened) == state
    assert calls[0] == (200, 201)  # the snapshot, then the checkpoint record alone
    assert list_snapshots(str(shard)) == [200]  # one record since: no second snapshot


def test_the_close_rule_wants_an_eighth_of_the_keys_in_records(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    with _writer(shard, _close_rule(100)) as writer:
        for i in range(99):
            writer.execute(0, [b"SET", b"k%d" % i, b"v"])
    assert list_snapshots(str(shard)) == []  # 99 records: under the rule's 100
    with _writer(shard, _close_rule(100)) as writer:
        for i in range(99, 1600):
            writer.execute(0, [b"SET", b"k%d" % i, b"v"])
    assert list_snapshots(str(shard)) == [1600]
    with _writer(shard, _close_rule(100)) as writer:
        for i in range(150):  # 151 records with the checkpoint: under 1600 keys / 8
            writer.execute(0, [b"SET", b"k%d" % i, b"w"])
    assert list_snapshots(str(shard)) == [1600]
    with _writer(shard, _close_rule(100)) as writer:
        for i in range(100):
            writer.execute(0, [b"SET", b"k%d" % i, b"x"])
    assert list_snapshots(str(shard)) == [1600, 1851]


def test_a_close_waits_for_a_running_child_when_few_records_follow_it(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    writer = _writer(shard, _close_rule(100))
    for i in range(500):
        writer.execute(0, [b"SET", b"k%d" % i, b"v"])
    running = writer.snapshot_in_background()
    writer.execute(0, [b"SET", b"k0", b"after"])
    writer.close()
    assert running.finished and running.error is None
    assert list_snapshots(str(shard)) == [500]
    assert [mark.checkpoint_lsn for mark in checkpoints(shard)] == [500]


def test_the_close_rule() -> None:
    policy = SnapshotPolicy(on_close_records=100)
    assert not policy.due_on_close(99, 10)
    assert policy.due_on_close(100, 10)
    assert not policy.due_on_close(100, 808)  # under an eighth of the keys
    assert policy.due_on_close(101, 808)
    assert not SnapshotPolicy.off().due_on_close(10**9, 0)
    assert SnapshotPolicy().on_close_records == 10_000


def test_a_writer_that_appended_nothing_closes_without_a_snapshot(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    with _writer(shard, _close_rule(0)) as writer:
        for i in range(300):
            writer.execute(0, [b"SET", b"k%d" % i, b"v"])
    with _writer(shard, _close_rule(100)) as looking:
        end = looking.next_lsn
    assert list_snapshots(str(shard)) == []
    with _writer(shard, _close_rule(100)) as again:
        assert again.next_lsn == end  # the log as it was found
