"""Retention: every rule and its reason, the newest segment, snapshots, consumer pins,
``max_pinned_bytes``, dry runs, ``--before``, the writer applying the policy as it rotates,
a prune cut short at any point, and a property test: no consumer that is not marked lost ever
loses a change it has not confirmed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import moonish
from cli.main import main
from moonish.clock import FixedClock
from moonish.datadir import consumers, retention
from moonish.datadir.retention import RetentionPolicy, delete_segments, plan, prune, prune_shards
from moonish.errors import (
    CorruptionError,
    InvalidArgumentError,
    LsnNotRetainedError,
    WriterLockedError,
)
from moonish.log.reader import ShardReader
from moonish.log.segment import index_path, list_segments, list_snapshots, segment_path
from moonish.log.verify import verify_shard
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.state.config import StreamConfig, load_config, store_retention
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import state_image
from tests.conftest import START_US, kv
from tests.test_consumers import data_dir, fill, keyspace_shard

SECOND_US = 1_000_000


def sizes(shard: Path) -> dict[int, int]:
    return {b: os.path.getsize(segment_path(str(shard), b)) for b in list_segments(str(shard))}


def lsns(shard: Path, start: int = 0) -> list[int]:
    """Every LSN a reader returns from ``start`` (raises if it is not retained)."""
    with ShardReader(shard) as reader:
        reader.seek(start)
        return [frame.lsn for frame in reader.poll(1_000_000)]


def log_files(shard: Path) -> list[str]:
    """The shard's files but the retention lock (which a dry run takes too)."""
    return sorted(name for name in os.listdir(shard) if name != "RETENTION.lock")


def keyspace_state(writer: ShardWriter) -> list[bytes]:
    return sorted(state_image(db, key, entry) for db, key, entry in writer.keyspace.items())


def assert_sound(shard: Path) -> None:
    """The log verifies and reads from its oldest LSN to its end without a gap."""
    report = verify_shard(shard)
    got = lsns(shard, list_segments(str(shard))[0])
    assert got == list(range(got[0], report.next_lsn)) and len(got) == report.records


# -- the rules -----------------------------------------------------------------------------


def test_max_bytes_keeps_at_most_that_many_bytes(shard: Path) -> None:
    fill(shard, 300)
    before = sizes(shard)
    report = prune(str(shard), RetentionPolicy(max_bytes=5000))
    after = sizes(shard)
    assert report.deleted and {d.reason for d in report.deleted} == {"max_bytes"}
    assert sum(after.values()) <= 5000 < sum(after.values()) + report.deleted[-1].bytes
    assert [d.base_lsn for d in report.deleted] == sorted(set(before) - set(after))
    assert not any(os.path.exists(index_path(str(shard), d.base_lsn)) for d in report.deleted)
    assert_sound(shard)


def test_max_records_keeps_at_most_that_many_lsns(shard: Path) -> None:
    fill(shard, 300)
    report = prune(str(shard), RetentionPolicy(max_records=100))
    oldest = list_segments(str(shard))[0]
    assert {d.reason for d in report.deleted} == {"max_records"}
    assert 301 - oldest <= 100 < 301 - report.deleted[-1].base_lsn
    with pytest.raises(LsnNotRetainedError) as caught:
        lsns(shard, oldest - 1)
    assert caught.value.oldest_lsn == oldest
    assert_sound(shard)


def test_max_age_ms_uses_the_newest_record_of_a_segment(shard: Path) -> None:
    fill(shard, 200, step_us=SECOND_US)  # record i committed i - 1 seconds after START
    now_us = START_US + 199 * SECOND_US  # the newest record's time
    report = prune(str(shard), RetentionPolicy(max_age_ms=50_000), clock=FixedClock(now_us))
    assert {d.reason for d in report.deleted} == {"max_age_ms"}
    for deletion in report.deleted:  # newest record older than 50 s
        assert (199 - (deletion.last_lsn - 1)) * 1000 > 50_000
    first_kept = list_segments(str(shard))
    kept_last = first_kept[1] - 1  # the newest record of the oldest segment left
    assert (199 - (kept_last - 1)) * 1000 <= 50_000


def test_min_age_ms_holds_young_segments(shard: Path) -> None:
    fill(shard, 200, step_us=SECOND_US)
    clock = FixedClock(START_US + 199 * SECOND_US)
    report = prune(str(shard), RetentionPolicy(max_records=0, min_age_ms=100_000), clock=clock)
    assert report.held_by == "min_age_ms"
    for deletion in report.deleted:
        assert (199 - (deletion.last_lsn - 1)) * 1000 >= 100_000
    kept_last = list_segments(str(shard))[1] - 1
    assert (199 - (kept_last - 1)) * 1000 < 100_000


def test_the_newest_segment_always_stays(shard: Path) -> None:
    fill(shard, 100)
    newest = list_segments(str(shard))[-1]
    report = prune(str(shard), RetentionPolicy(max_records=0, max_bytes=0, max_age_ms=0))
    assert list_segments(str(shard)) == [newest] and report.held_by == "active segment"
    assert_sound(shard)
    fill(shard, 5)  # the writer continues after the end (control.json is untouched)
    assert lsns(shard, newest)[-1] == 105


def test_the_first_rule_that_wants_a_segment_is_its_reason(shard: Path) -> None:
    fill(shard, 300)
    total = sum(sizes(shard).values())
    policy = RetentionPolicy(max_bytes=total - 2000, max_records=150)
    reasons = [d.reason for d in prune(str(shard), policy).deleted]
    assert reasons[0] == "max_bytes" and reasons[-1] == "max_records"


def test_a_policy_that_deletes_nothing_keeps_everything(shard: Path) -> None:
    fill(shard, 100)
    before = sizes(shard)
    report = prune(str(shard), RetentionPolicy(min_age_ms=0, max_pinned_bytes=0))
    assert report.deleted == () and report.held_by is None and sizes(shard) == before


def test_policies_are_checked() -> None:
    with pytest.raises(InvalidArgumentError):
        RetentionPolicy(max_bytes=-1)
    with pytest.raises(InvalidArgumentError):
        RetentionPolicy.from_json({"max_bites": 1})
    policy = RetentionPolicy(max_bytes=1, min_age_ms=2)
    assert RetentionPolicy.from_json(policy.to_json()) == policy


def test_only_a_run_of_the_oldest_segments_is_deleted(shard: Path) -> None:
    fill(shard, 100)
    found = plan(str(shard), RetentionPolicy(max_records=0), now_ms=0)
    with pytest.raises(InvalidArgumentError):
        delete_segments(str(shard), found.deletions[1:2])  # a hole in the log
    with pytest.raises(InvalidArgumentError):
        delete_segments(str(shard), found.deletions[::-1])
    assert_sound(shard)


# -- snapshots -----------------------------------------------------------------------------


def test_a_keyspace_shard_keeps_what_its_snapshot_needs(tmp_path: Path) -> None:
    shard = tmp_path / "shard-0"
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=2048,
                                         heartbeat_ms=None), expiry_sweep_ms=0)  # fmt: skip
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        for i in range(150):
            writer.execute(0, ["SET", f"k{i % 13}", "v" * 30])
    policy = RetentionPolicy(max_records=0)
    report = prune(str(shard), policy)  # no snapshot: the writer needs every record
    assert report.deleted == () and report.snapshot_blocked
    assert report.held_by == "snapshot at LSN 0"
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        _, first = writer.checkpoint()
        for i in range(150):
            writer.execute(0, ["SET", f"k{i % 13}", "w" * 30])
        _, second = writer.checkpoint()
        state = keyspace_state(writer)
    assert list_snapshots(str(shard)) == [first, second]
    report = prune(str(shard), policy)
    assert report.deleted and all(d.last_lsn <= first for d in report.deleted)
    assert report.held_by == f"snapshot at LSN {first}" and report.snapshot_blocked
    # a --snapshot reader and the writer still find what they need
    rows = moonish.read(shard, 0, 10_000, snapshot=True)
    assert rows.events and rows.events[0].op == "r"
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        assert keyspace_state(writer) == state
    assert_sound(shard)


def test_the_writer_applies_the_policy_as_it_rotates(tmp_path: Path) -> None:
    shard = tmp_path / "shard-0"
    policy = RetentionPolicy(max_records=120)
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=2048, heartbeat_ms=None),
        StreamConfig(retention=policy),
        expiry_sweep_ms=0,
    )
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        for i in range(600):
            writer.execute(0, ["SET", f"k{i % 29}", f"value-{i}" * 4])
            assert writer.retention_error is None
            assert writer.next_lsn - list_segments(str(shard))[0] <= 120 + 40  # a segment
        assert writer.last_prune is not None
        state = keyspace_state(writer)
    assert load_config(str(shard)) is not None
    assert list_snapshots(str(shard))  # a snapshot was written first, when it held the policy
    assert list_segments(str(shard))[0] > 1
    assert_sound(shard)
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:  # recovers
        assert keyspace_state(writer) == state


def test_a_retention_failure_never_fails_an_append(tmp_path: Path) -> None:
    root = tmp_path / "data"
    shard = root / "shard-0"
    keyspace_shard(shard, 50)
    consumers.create(root, "c", (1,))
    (root / "consumers" / "c.json").write_bytes(b"{}")  # damaged: what it pins is unknown
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=2048,
                                         heartbeat_ms=None), expiry_sweep_ms=0)  # fmt: skip
    before = list_segments(str(shard))[0]
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        writer.set_retention(RetentionPolicy(max_records=0))
        for i in range(200):
            writer.execute(0, ["SET", f"k{i}", "v" * 40])
        assert isinstance(writer.retention_error, CorruptionError)
        assert list_segments(str(shard))[0] == before  # nothing deleted blindly
        consumers.drop(root, "c")
        for i in range(60):
            writer.execute(0, ["SET", f"k{i}", "w" * 40])
        assert writer.retention_error is None and list_segments(str(shard))[0] > before


# -- consumers -----------------------------------------------------------------------------


def test_consumers_pin_what_they_have_not_confirmed(tmp_path: Path) -> None:
    root = data_dir(tmp_path, shards=1, records=200)
    shard = root / "shard-0"
    consumers.create(root, "c", (42,))
    report = prune(str(shard), RetentionPolicy(max_records=0))
    assert report.held_by == "consumer c"
    assert all(d.last_lsn <= 42 for d in report.deleted)
    assert lsns(shard, 43)[0] == 43
    consumers.ack(root, "c", (150,))
    report = prune(str(shard), RetentionPolicy(max_records=0))
    assert report.deleted and all(d.last_lsn <= 150 for d in report.deleted)
    assert lsns(shard, 151)[0] == 151


def test_max_pinned_bytes_marks_the_laggiest_lost(tmp_path: Path) -> None:
    root = data_dir(tmp_path, shards=1, records=300)
    shard = root / "shard-0"
    consumers.create(root, "slow", (5,))
    consumers.create(root, "medium", (200,))
    consumers.create(root, "fast", (300,))
    segs = sizes(shard)
    bases = sorted(segs)
    # what "medium" alone holds: the sealed segments from the one holding LSN 201
    held = sum(segs[b] for i, b in enumerate(bases[:-1]) if bases[i + 1] - 1 > 200)
    policy = RetentionPolicy(max_records=0, max_pinned_bytes=held)
    report = prune(str(shard), policy)
    assert [lost.name for lost in report.lost] == ["slow"]
    assert "max_pinned_bytes" in report.lost[0].reason
    assert consumers.load(root, "slow").lost and not consumers.load(root, "medium").lost
    assert report.held_by == "consumer medium" and lsns(shard, 201)[0] == 201
    report = prune(str(shard), RetentionPolicy(max_records=0, max_pinned_bytes=0))
    assert [lost.name for lost in report.lost] == ["medium"]  # fast holds nothing
    assert not consumers.load(root, "fast").lost and report.held_by == "active segment"


def test_a_dry_run_changes_nothing(tmp_path: Path) -> None:
    root = data_dir(tmp_path, shards=1, records=300)
    shard = root / "shard-0"
    consumers.create(root, "slow", (5,))
    files = sorted(os.listdir(shard))
    stored = (root / "consumers" / "slow.json").read_bytes()
    policy = RetentionPolicy(max_records=0, max_pinned_bytes=0)
    report = prune(str(shard), policy, dry_run=True)
    assert report.deleted and [lost.name for lost in report.lost] == ["slow"]
    assert sorted(os.listdir(shard)) == files
    assert (root / "consumers" / "slow.json").read_bytes() == stored
    assert report.to_json()["dry_run"] is True


def test_before_refuses_to_pass_a_consumer_without_force(tmp_path: Path) -> None:
    root = data_dir(tmp_path, shards=2, records=200)
    shards = [str(root / "shard-0"), str(root / "shard-1")]
    consumers.create(root, "c", (200, 20))  # shard 0 alone could be pruned
    files = [sorted(os.listdir(shard)) for shard in shards]
    policies = [RetentionPolicy()] * 2
    with pytest.raises(InvalidArgumentError, match=r"consumer\(s\) c "):
        prune_shards(shards, policies, before=[150, 150])
    assert [sorted(os.listdir(shard)) for shard in shards] == files  # nothing, anywhere
    reports = prune_shards(shards, policies, before=[150, 150], force=True)
    assert {d.reason for r in reports for d in r.deleted} == {"before"}
    assert all(d.last_lsn <= 150 for r in reports for d in r.deleted)
    assert consumers.load(root, "c").lost
    assert "--before 150 --force" in (consumers.load(root, "c").lost_reason or "")


# -- crashes -------------------------------------------------------------------------------


def test_a_prune_cut_short_anywhere_leaves_a_readable_log(tmp_path: Path) -> None:
    template = tmp_path / "template"
    fill(template, 200)
    planned = plan(str(template), RetentionPolicy(max_records=0), now_ms=0).deletions
    assert len(planned) > 5
    for cut in range(len(planned) + 1):
        for index_only in (False, True):  # the crash came between an index and its segment
            shard = tmp_path / f"cut-{cut}-{index_only}"
            subprocess.run(["cp", "-a", str(template), str(shard)], check=True)
            delete_segments(str(shard), [retention.Deletion(
                segment_path(str(shard), d.base_lsn), d.base_lsn, d.last_lsn, d.bytes, d.reason
            ) for d in planned[:cut]])  # fmt: skip
            if index_only and cut < len(planned):
                os.unlink(index_path(str(shard), planned[cut].base_lsn))
            assert_sound(shard)
            oldest = planned[cut - 1].last_lsn + 1 if cut else 1
            assert lsns(shard, oldest)[0] == oldest
            report = prune(str(shard), RetentionPolicy(max_records=0))  # finishes the job
            assert len(list_segments(str(shard))) == 1 and report.held_by == "active segment"


PRUNER = """
import sys
from moonish.datadir.retention import RetentionPolicy, prune
print("start", flush=True)
prune(sys.argv[1], RetentionPolicy(max_records=0))
"""


def test_a_killed_prune_leaves_a_readable_log(tmp_path: Path) -> None:
    for round_ in range(3):
        shard = tmp_path / f"shard-{round_}"
        fill(shard, 2000, segment_bytes=512)
        proc = subprocess.Popen([sys.executable, "-c", PRUNER, str(shard)],
                                stdout=subprocess.PIPE)  # fmt: skip
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


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_no_consumer_loses_an_unconfirmed_change_unless_marked_lost(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        shards = [root / "shard-0", root / "shard-1"]
        for k, shard in enumerate(shards):
            fill(shard, 1, segment_bytes=400, shard_id=k)
        options = [WriterOptions(shard_id=k, fsync=FsyncPolicy.NEVER, segment_bytes=400,
                                 heartbeat_ms=None) for k in range(2)]  # fmt: skip
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


# -- the commands --------------------------------------------------------------------------


def test_wal_retention_shows_sets_and_clears(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    for k in range(2):
        keyspace_shard(root / f"shard-{k}", 20)
    assert main(["wal", "retention", str(root)]) == 0
    shown = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["retention"]["max_bytes"] for line in shown] == [None, None]
    assert main(["wal", "retention", str(root), "--max-bytes", "1G", "--min-age-ms", "60000"]) == 0
    set_ = [orjson.loads(line)["retention"] for line in capsys.readouterr().out.splitlines()]
    assert set_[1] == {"max_bytes": 1 << 30, "max_age_ms": None, "max_records": None,
                       "min_age_ms": 60000, "max_pinned_bytes": None}  # fmt: skip
    assert main(["wal", "retention", str(root), "--max-records", "10"]) == 0  # merged
    merged = orjson.loads(capsys.readouterr().out.splitlines()[0])["retention"]
    assert merged["max_bytes"] == 1 << 30 and merged["max_records"] == 10
    assert main(["cdc", "info", str(root / "shard-0")]) == 0
    assert orjson.loads(capsys.readouterr().out)["retention"]["max_records"] == 10
    assert main(["wal", "stream", str(root), "--view", "KEYS_ONLY"]) == 0  # keeps the policy
    capsys.readouterr()
    assert load_config(str(root / "shard-0")).retention.max_records == 10  # type: ignore[union-attr]
    assert main(["wal", "retention", str(root), "--clear"]) == 0
    cleared = orjson.loads(capsys.readouterr().out.splitlines()[0])["retention"]
    assert set(cleared.values()) == {None}
    assert b"retention" not in (root / "shard-0" / "stream.json").read_bytes()
    assert main(["wal", "retention", str(root), "--max-bytes", "12Q"]) == 2


def test_wal_retention_needs_the_writer_lock_and_a_stream_configuration(shard: Path) -> None:
    fill(shard, 10)
    with pytest.raises(InvalidArgumentError, match="no stream configuration"):
        store_retention(str(shard), RetentionPolicy(max_bytes=1))
    keyspace = shard.parent / "keyspace"
    keyspace_shard(keyspace, 10)
    options = ShardOptions(WriterOptions(heartbeat_ms=None), expiry_sweep_ms=0)
    with ShardWriter(keyspace, options), pytest.raises(WriterLockedError):
        store_retention(str(keyspace), RetentionPolicy(max_bytes=1))
    assert main(["wal", "retention", str(shard), "--max-bytes", "1"]) == 2


def test_wal_prune_prints_what_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "data"
    keyspace_shard(root / "shard-0", 300)
    store_retention(str(root / "shard-0"), RetentionPolicy(max_records=50))
    files = log_files(root / "shard-0")
    assert main(["wal", "prune", str(root), "--dry-run"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["dry_run"] and report["deleted"]
    assert {d["reason"] for d in report["deleted"]} == {"max_records"}
    assert log_files(root / "shard-0") == files
    assert main(["wal", "prune", str(root)]) == 0
    done = orjson.loads(capsys.readouterr().out)
    assert done["deleted"] == report["deleted"] and done["deleted_bytes"] > 0
    assert not (root / "shard-0" / done["deleted"][0]["segment"]).exists()
    consumers.create(root, "c", (list_segments(str(root / "shard-0"))[0],))
    assert main(["wal", "prune", str(root), "--before", "now"]) == 2
    assert "consumer(s) c" in capsys.readouterr().err
    assert main(["wal", "prune", str(root), "--force"]) == 2
    assert main(["wal", "prune", str(root), "--before", "now", "--force"]) == 0
    assert orjson.loads(capsys.readouterr().out)["lost"][0]["consumer"] == "c"
    assert main(["consumer", "ack", str(root), "c", "now"]) == 3
