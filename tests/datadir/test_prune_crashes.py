"""A prune cut short at any point or killed leaves a readable log, and a property test: no consumer
that is not marked lost ever loses a change it has not confirmed, whatever appends, acks, seeks
and crashing prunes come in between."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moonish.datadir import consumers, retention
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import delete_segments, plan, prune
from moonish.log.segment import index_path, list_segments, segment_path
from moonish.log.verify import verify_shard
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from tests.support.datadirs import fill
from tests.support.retention import assert_sound, lsns
from tests.support.scale import scaled
from tests.support.wal import kv


# -- crashes -------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_prune_cut_short_anywhere_leaves_a_readable_log(tmp_path: Path) -> None:
    template = tmp_path / "template"
    fill(template, 200)
    planned = plan(str(template), RetentionPolicy(max_records=0), now_ms=0).deletions
    assert len(planned) > 5
    for cut in range(len(planned) + 1):
        for index_only in (False, True):  # the crash came between an index and its segment
            shard = tmp_path / f"cut-{cut}-{index_only}"
            subprocess.run(["cp", "-a", str(template), str(shard)], check=True)
            delete_segments(
                str(shard),
                [
                    retention.Deletion(
                        segment_path(str(shard), d.base_lsn),
                        d.base_lsn,
                        d.last_lsn,
                        d.bytes,
                        d.reason,
                    )
                    for d in planned[:cut]
                ],
            )
            if index_only and cut < len(planned):
                os.unlink(index_path(str(shard), planned[cut].base_lsn))
            assert_sound(shard)
            oldest = planned[cut - 1].last_lsn + 1 if cut else 1
            assert lsns(shard, oldest)[0] == oldest
            report = prune(str(shard), RetentionPolicy(max_records=0))  # finishes the job
            assert len(list_segments(str(shard))) == 1 and report.held_by == "active segment"


PRUNER = """
import sys
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import prune
print("start", flush=True)
prune(sys.argv[1], RetentionPolicy(max_records=0))
"""


@pytest.mark.slow
def test_a_killed_prune_leaves_a_readable_log(tmp_path: Path) -> None:
    for round_ in range(3):
        shard = tmp_path / f"shard-{round_}"
        fill(shard, 2000, segment_bytes=512)
        proc = subprocess.Popen([sys.executable, "-c", PRUNER, str(shard)], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"start\n"
        time.sleep(0.005 * round_)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        assert_sound(shard)


# -- the property --------------------------------------------------------------------------
class Crash(Exception):
    """A prune stopped after some deletions (as if the process died there)."""


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 1), st.integers(1, 40)),
        st.tuples(st.just("create"), st.sampled_from("abc"), st.sampled_from(["earliest", "now"])),
        st.tuples(st.just("ack"), st.sampled_from("abc"), st.integers(0, 99), st.integers(-2, 1)),
        st.tuples(st.just("seek"), st.sampled_from("abc")),
        st.tuples(
            st.just("prune"),
            st.integers(0, 20),
            st.sampled_from([None, None, None, 0, 400, 2000]),
            st.one_of(st.none(), st.integers(0, 6)),
        ),
    ),
    max_size=25,
)


@settings(max_examples=scaled(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
@pytest.mark.slow
def test_no_consumer_loses_an_unconfirmed_change_unless_marked_lost(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        shards = [root / "shard-0", root / "shard-1"]
        for k, shard in enumerate(shards):
            fill(shard, 1, segment_bytes=400, shard_id=k)
        options = [
            WriterOptions(shard_id=k, fsync=FsyncPolicy.NEVER, segment_bytes=400, heartbeat_ms=None)
            for k in range(2)
        ]
        writers = [WalWriter(shard, opts) for shard, opts in zip(shards, options, strict=True)]
        try:
            for op in ops:
                run_op(root, shards, writers, op)
                check_consumers(root, shards)
        finally:
            for writer in writers:
                writer.close()
        for shard in shards:
            assert_sound(shard)


def run_op(root: Path, shards: list[Path], writers: list[WalWriter], op: tuple) -> None:  # type: ignore[type-arg]
    kind = op[0]
    existing = {c.name: c for c in consumers.list_consumers(root)}
    latest = [writer.next_lsn - 1 for writer in writers]
    if kind == "append":
        for i in range(op[2]):
            writers[op[1]].append(kv(b"key%d" % i, b"x" * 20))
    elif kind == "create" and op[1] not in existing:
        oldest = [list_segments(str(shard))[0] - 1 for shard in shards]
        consumers.create(root, op[1], oldest if op[2] == "earliest" else latest)
    elif kind == "ack" and op[1] in existing and not existing[op[1]].lost:
        # next to a segment boundary, where an off-by-one in pinning would show
        wanted = []
        for shard, old, end in zip(shards, existing[op[1]].positions, latest, strict=True):
            ahead = [base for base in list_segments(str(shard)) if base > old + 2] or [end]
            wanted.append(max(old, min(end, ahead[op[2] % len(ahead)] + op[3])))
        assert consumers.ack(root, op[1], wanted).positions == tuple(wanted)
    elif kind == "seek" and op[1] in existing:
        consumers.seek(root, op[1], [list_segments(str(shard))[0] - 1 for shard in shards])
    elif kind == "prune":
        policy = RetentionPolicy(max_records=op[1], max_pinned_bytes=op[2])
        for shard in shards:
            prune_crashing(shard, policy, op[3])


def prune_crashing(shard: Path, policy: RetentionPolicy, crash_after: int | None) -> None:
    """Prune, dying (``Crash``) after ``crash_after`` segments were removed."""
    real = retention.fsync_dir
    count = [0]

    def fsync_then_maybe_die(path: str) -> None:
        real(path)
        count[0] += 1
        if crash_after is not None and count[0] > crash_after:
            raise Crash

    retention.fsync_dir = fsync_then_maybe_die  # type: ignore[attr-defined]
    try:
        prune(str(shard), policy)
    except Crash:
        pass
    finally:
        retention.fsync_dir = real  # type: ignore[attr-defined]


def check_consumers(root: Path, shards: list[Path]) -> None:
    """Every consumer not marked lost reads every change after its position, in order."""
    for consumer in consumers.list_consumers(root):
        if consumer.lost:
            continue
        for shard, position in zip(shards, consumer.positions, strict=True):
            got = lsns(shard, position + 1)  # LsnNotRetainedError fails the property
            assert got == list(range(position + 1, position + 1 + len(got)))
            assert verify_shard(shard).next_lsn == position + 1 + len(got)
