"""The damage adversary: seeded random byte flips, zeroed ranges and truncations at every kind
of position of a shard (segment header, frame header, payload, frame checksum, index,
snapshot, stream configuration, control file), each outcome classified against what the
shard held before the damage:

- every record of every whole batch before the damage is delivered, byte for byte, and then
  ``CorruptionError`` names the damaged file, the offset of the damaged frame (or of its
  batch) and its LSN, exactly as ``wal verify`` does; or
- the damage is a torn tail (a truncated newest segment; zeros from a sector boundary) that
  ``wal verify`` reports and the next writer cuts, exactly there and nowhere else, continuing
  after the LSNs the cut frame headers name;
- damage outside the segments costs no record: a damaged index is rebuilt by the writer and
  reported by verify, a damaged snapshot, stream configuration or control file is an error
  naming it, raised where it is needed (after every record, for the control file);
- never a silent difference, never fewer records than are intact, never a traceback or hang.

``MOONISH_DAMAGE_TRIALS`` (default 300, scaled by ``MOONISH_TEST_SCALE``) and
``MOONISH_DAMAGE_SEED`` replay or scale a run; ``make stress`` runs thousands. A failure
names the trial, the seed and the damage.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from moonish.cdc import shard_read
from moonish.clock import FixedClock
from moonish.errors import CorruptionError, MoonishError
from moonish.log.control import Control, store_control
from moonish.log.format import SEGMENT_HEADER_BYTES
from moonish.log.frames import scan_frames
from moonish.log.segment import list_segments, segment_path
from moonish.log.verify import verify_shard
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.scale import scaled

TRIALS = int(os.environ.get("MOONISH_DAMAGE_TRIALS", scaled(300)))
SEED = int(os.environ.get("MOONISH_DAMAGE_SEED", "20261123"))
CLI_EVERY = int(os.environ.get("MOONISH_DAMAGE_CLI_EVERY", "15"))
START_US = 1_795_000_000_000_000
READ_CLOCK = FixedClock(1_796_000_000_000_000)


@dataclass(frozen=True, slots=True)
class Stored:
    """One record of the template as stored: where its frame is and what it reads as."""

    lsn: int
    segment: str
    start: int
    end: int
    batch_end: int  # file offset where its batch's last frame ends
    envelope: bytes


@dataclass(frozen=True, slots=True)
class Template:
    path: Path
    records: list[Stored]
    segments: list[str]  # file names, oldest first

    def before(self, segment: str, offset: int) -> list[Stored]:
        """The records of every whole batch before ``offset`` of ``segment``."""
        order = self.segments.index(segment)
        return [
            r
            for r in self.records
            if self.segments.index(r.segment) < order
            or (r.segment == segment and r.batch_end <= offset)
        ]


def _build(path: Path) -> Template:
    """About 200 kv_change records over a dozen segments: commands, multi-key commands and
    MULTI blocks (atomic batches), large values, a snapshot in the middle."""
    log = WriterOptions(segment_bytes=3000, fsync=FsyncPolicy.NEVER, index_interval_bytes=400)
    rng = random.Random(7)
    with ShardWriter(path, ShardOptions(log, expiry_sweep_ms=0), FixedClock(START_US, 1000)) as w:
        for i in range(90):
            value = "v" * rng.choice((1, 20, 300, 1500))
            if i % 5 == 0:
                w.transaction(
                    [
                        (0, ["SET", f"k{i}", value]),
                        (0, ["INCR", "n"]),
                        (1, ["RPUSH", "list", f"x{i}"]),
                    ]
                )
            elif i % 5 == 1:
                w.execute(0, ["MSET", f"a{i}", "1", f"b{i}", "2", f"c{i}", "3"])
            elif i % 5 == 2:
                w.execute(0, ["HSET", f"h{i % 7}", "f", value])
            else:
                w.execute(0, ["SET", f"k{i}", value])
            if i == 45:
                w.checkpoint()
    names = [os.path.basename(segment_path(str(path), b)) for b in list_segments(str(path))]
    envelopes = {
        e.lsn: e.envelope for e in shard_read.tail(path, 0, clock=READ_CLOCK, messages=True)
    }
    records: list[Stored] = []
    for name in names:
        data = (path / name).read_bytes()
        frames, _, stop = scan_frames(data, SEGMENT_HEADER_BYTES, int(name[:16], 16), 10**9)
        assert stop is None and frames
        ends = [f.offset for f in frames[1:]] + [len(data)]
        for frame, end in zip(frames, ends, strict=True):
            last = frames.index(frame) + frame.batch_size - 1 - frame.batch_index
            records.append(
                Stored(frame.lsn, name, frame.offset, end, ends[last], envelopes[frame.lsn])
            )
    return Template(path, records, names)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return _build(tmp_path_factory.mktemp("template") / "shard-0")


@dataclass(frozen=True, slots=True)
class Damage:
    file: str  # name in the shard directory
    where: str  # kind of position
    how: str  # flip, flips, zeros, truncate
    first: int  # first byte changed (or the cut offset)


def _damage(rng: random.Random, shard: Path, template: Template) -> Damage:
    """Damage one file of ``shard`` at a random kind of position; bytes always change."""
    where = rng.choice(
        [
            "segment header",
            "frame header",
            "payload",
            "frame checksum",
            "frame header",
            "payload",
            "index",
            "snapshot",
            "stream config",
            "control file",
        ]
    )
    if where == "index":
        name = rng.choice([p.name for p in shard.glob("*.idx") if p.stat().st_size])
    elif where == "snapshot":
        name = next(p.name for p in shard.glob("*.snap"))
    elif where == "stream config":
        name = "stream.json"
    elif where == "control file":
        name = "control.json"
    else:
        newest = rng.random() < 0.5
        name = template.segments[-1] if newest else rng.choice(template.segments)
    data = bytearray((shard / name).read_bytes())
    if where == "segment header":
        low, high = 0, SEGMENT_HEADER_BYTES
    elif where in ("frame header", "payload", "frame checksum"):
        record = rng.choice([r for r in template.records if r.segment == name])
        low, high = {
            "frame header": (record.start, record.start + 36),
            "payload": (record.start + 36, record.end - 4),
            "frame checksum": (record.end - 4, record.end),
        }[where]
    else:
        low, high = 0, len(data)
    at = rng.randrange(low, high)
    how = rng.choice(["flip", "flip", "flips", "zeros", "truncate"])
    original = bytes(data)
    if how == "flip":
        data[at] ^= rng.randrange(1, 256)
    elif how == "flips":
        for spot in {at, *(rng.randrange(at, min(at + 64, len(data))) for _ in range(7))}:
            data[spot] ^= rng.randrange(1, 256)
    elif how == "zeros":
        end = min(at + rng.randrange(1, 700), len(data))
        data[at:end] = bytes(end - at)
    else:
        del data[at:]
    if bytes(data) == original:
        return _damage(rng, shard, template)  # zeros over zeros: try again
    first = next(
        (i for i, (a, b) in enumerate(zip(original, data, strict=False)) if a != b), len(data)
    )
    (shard / name).write_bytes(bytes(data))
    return Damage(name, where, how, first)


def _read_all(shard: Path) -> tuple[list[tuple[int, bytes]], MoonishError | None]:
    got: list[tuple[int, bytes]] = []
    try:
        with shard_read.tail(shard, 0, clock=READ_CLOCK, messages=True) as stream:
            for event in stream:
                got.append((event.lsn, event.envelope))
    except MoonishError as error:
        return got, error
    return got, None


def _check(template: Template, shard: Path, damage: Damage, killed: bool) -> str:
    """Classify the outcome; assert it is an allowed one. Returns the class. ``killed``: the
    last writer died (control.json unclean) rather than closing, so a cut newest segment may
    be a torn tail; after a clean close it is records lost from the end."""
    got, error = _read_all(shard)
    everything = [(r.lsn, r.envelope) for r in template.records]
    assert all(pair in everything for pair in got), "a record changed"
    if not damage.file.endswith(".seg"):
        return _check_other(template, shard, damage, got, error)
    intact = [(r.lsn, r.envelope) for r in template.before(damage.file, damage.first)]
    assert got == intact, f"delivered {len(got)} records, {len(intact)} intact before the damage"
    seg = shard / damage.file
    newest = damage.file == template.segments[-1]
    if error is None:  # a torn tail: only at the end of the newest segment, after a crash
        assert killed and newest and damage.how in ("truncate", "zeros"), "damage passed"
        report = verify_shard(shard)
        committed = max(
            (
                r.batch_end
                for r in template.before(damage.file, damage.first)
                if r.segment == damage.file
            ),
            default=SEGMENT_HEADER_BYTES,
        )
        assert report.torn_tail_bytes == seg.stat().st_size - committed
        end = intact[-1][0] + 1 if intact else int(damage.file[:16], 16)
        assert report.torn_tail_lsns is None or report.torn_tail_lsns[0] == end
        with WalWriter(shard, WriterOptions(fsync=FsyncPolicy.NEVER)) as writer:
            assert writer.recovery.truncated_bytes == report.torn_tail_bytes
            assert writer.recovery.discarded == report.torn_tail_lsns
            assert writer.next_lsn == report.next_lsn  # after the LSNs the cut tail named
        return "torn tail, cut by the next writer"
    assert isinstance(error, CorruptionError), repr(error)
    assert error.path == str(seg) and error.offset is not None and error.lsn is not None
    damaged = [r for r in template.records if r.segment == damage.file and r.end > damage.first]
    if damage.first < SEGMENT_HEADER_BYTES:
        assert error.lsn == int(damage.file[:16], 16)
    else:
        frame = damaged[0]
        batch_start = min(
            r.start
            for r in template.records
            if r.segment == damage.file and r.batch_end == frame.batch_end
        )
        assert batch_start <= error.offset <= frame.start, (error.offset, frame)
        at = [r for r in template.records if r.segment == damage.file and r.start == error.offset]
        assert [error.lsn] == [r.lsn for r in at]
    with pytest.raises(CorruptionError) as verified:
        verify_shard(shard)
    assert (verified.value.path, verified.value.offset, verified.value.lsn) == (
        error.path,
        error.offset,
        error.lsn,
    )
    if newest:
        before = seg.read_bytes()
        with pytest.raises(CorruptionError):
            WalWriter(shard, WriterOptions(fsync=FsyncPolicy.NEVER))
        assert seg.read_bytes() == before, "the writer cut damage"
    return "corruption named, every intact record first"


def _check_other(
    template: Template,
    shard: Path,
    damage: Damage,
    got: list[tuple[int, bytes]],
    error: MoonishError | None,
) -> str:
    everything = [(r.lsn, r.envelope) for r in template.records]
    assert got == everything, "damage outside the segments cost a record"
    named = str(shard / damage.file)
    if damage.file == "control.json":
        assert isinstance(error, CorruptionError) and error.path == named
        return "control file: named after every record"
    assert error is None, repr(error)
    if damage.file.endswith(".idx"):
        try:
            verify_shard(shard)
            return "index: still correct (whole entries cut)"
        except CorruptionError as verified:
            assert verified.path == named
            return "index: verify names it, readers unaffected"
    with pytest.raises(CorruptionError) as info:
        if damage.file.endswith(".snap"):
            shard_read.read(shard, 0, snapshot=True)
        else:
            shard_read.info(shard)
    assert info.value.path == named
    return f"{damage.where}: named where it is needed"


def _check_cli(shard: Path, got_before: int, expect_error: bool) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "cdc", "tail", str(shard), "--messages"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert b"Traceback" not in run.stderr, run.stderr
    assert len(run.stdout.splitlines()) == got_before
    if expect_error:
        assert run.returncode == 4, run.stderr
        assert b"offset" in run.stderr and b"LSN" in run.stderr
    else:
        assert run.returncode == 0, run.stderr


def test_random_damage_is_named_or_a_torn_tail_and_costs_no_intact_record(
    template: Template, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for trial in range(TRIALS):
        shard = tmp_path / f"trial-{trial}" / "shard-0"
        shutil.copytree(template.path, shard)
        killed = rng.random() < 0.5
        if killed:  # as a writer that opened at the newest segment's base LSN and died
            store_control(str(shard), Control(0, int(template.segments[-1][:16], 16), False))
        damage = _damage(rng, shard, template)
        kinds[f"{damage.where}/{damage.how}"] += 1
        context = f"trial {trial} (MOONISH_DAMAGE_SEED={SEED}, killed {killed}): {damage}"
        try:
            if CLI_EVERY and trial % CLI_EVERY == 0 and damage.file.endswith(".seg"):
                got, error = _read_all(shard)
                _check_cli(shard, len(got), error is not None)
            outcomes[_check(template, shard, damage, killed)] += 1
        except AssertionError as failure:
            raise AssertionError(f"{context}: {failure}") from failure
        shutil.rmtree(shard.parent)
    print(f"\n{TRIALS} trials, seed {SEED}: {dict(outcomes)}\npositions: {dict(kinds)}")
    assert len({kind.split("/")[0] for kind in kinds}) == 8  # every kind of position was hit
