"""Crash test with real processes: writer processes of one shard are SIGKILLed at random
moments, round after round, or leave a torn tail (a prefix of an append's frames) or a
zero-filled tail and kill themselves, while two follower processes tail the shard the whole
time (a ``ShardReader`` poll loop and ``moonish.tail(follow=True)``). It proves that:

- the log stays sound: ``verify_shard`` passes after every kill, and every reopened writer
  cuts exactly the torn tail and resumes at the LSN after the last committed record, or after
  the LSNs the tail's frame headers name (recorded as discarded: never given again);
- no append that returned is lost (``FsyncPolicy.NEVER``: a killed process's writes stay in
  the page cache), and no record changes: what a follower saw for LSN n is what a fresh read
  of the final log returns for LSN n, and it is what the writer appended under that LSN;
- nothing of a torn tail is ever read, batches are all or nothing, and the followers never
  fail, never raise ``CorruptionError`` and never stall: each saw every LSN of the final log
  once, in order, passing over the LSNs torn tails named (they had read none of them).

``MOONISH_CRASH_ROUNDS`` (default 40, scaled by ``MOONISH_TEST_SCALE``) sets the number of
writer processes, and
``MOONISH_CRASH_SEED`` the seed. The seed fixes every choice the test and the writers make
(modes, records, torn bytes, kill delays); where a kill lands also depends on scheduling.
The child processes' code is in tests/support/crash_procs.py.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from moonish.log.format import FLAG_BATCH
from moonish.log.frames import Frame
from moonish.log.payloads import decode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import KvCommand
from moonish.log.verify import VerifyReport, verify_shard
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from tests.support.crash_procs import digest, make_value, parse_key
from tests.support.paths import ROOT
from tests.support.scale import scaled

ROUNDS = int(os.environ.get("MOONISH_CRASH_ROUNDS", scaled(40)))
SEED = int(os.environ.get("MOONISH_CRASH_SEED", "20250601"))
MODE_WEIGHTS = {"kill": 60, "torn": 18, "zero": 10, "clean": 12}
MAX_BATCH = 6


@dataclass
class WriterRun:
    """What one writer process logged (tests/support/crash_procs.py describes the lines)."""

    generation: int
    mode: str
    opened: tuple[int, int] | None = None  # (next_lsn, truncated_bytes)
    appends: list[tuple[int, int, bool, list[str]]] = field(default_factory=list)
    tail: tuple[str, int, int] | None = None  # ("torn" | "zero", lsn, bytes)
    closed: int | None = None

    @classmethod
    def parse(cls, generation: int, mode: str, text: str) -> WriterRun:
        run = cls(generation, mode)
        for line in text.splitlines():
            kind, *rest = line.split()
            if kind == "open":
                run.opened = (int(rest[0]), int(rest[1]))
            elif kind == "a":
                run.appends.append((int(rest[0]), int(rest[1]), rest[2] == "1", rest[3].split(",")))
            elif kind in ("torn", "zero"):
                run.tail = (kind, int(rest[0]), int(rest[1]))
            elif kind == "closed":
                run.closed = int(rest[0])
        return run

    def next_after_appends(self) -> int | None:
        """The LSN after the last append that returned (the opening LSN if none did)."""
        if self.appends:
            first, count, _, _ = self.appends[-1]
            return first + count
        return self.opened[0] if self.opened else None


class Children:
    """Every process the test starts, each in its own process group; all killed on exit."""

    def __init__(self, stderr_path: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stderr_path = stderr_path

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        with open(self.stderr_path, "ab") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.crash_procs", *args],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@contextmanager
def children(stderr_path: Path) -> Iterator[Children]:
    procs = Children(stderr_path)
    try:
        yield procs
    finally:
        procs.kill_all()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.002)


def last_lsn(path: Path) -> int:
    """The LSN of the last complete line of a follower's output (0 if none)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - 512))
            tail = handle.read()
    except FileNotFoundError:
        return 0
    lines = tail.split(b"\n")[:-1]
    return int(lines[-1].split()[0]) if lines and size else 0


FOLLOWERS = ("the ShardReader follower", "the moonish.tail follower")


def await_followers(
    followers: list[subprocess.Popen[bytes]], outs: list[Path], total: int, errors: Path
) -> list[int]:
    """Wait (30 s at most) until every follower has output LSN ``total``, the end of the log.
    A follower that does not get there is stalled: it is asked for a stack dump (faulthandler
    on SIGUSR1, to the children's stderr) for the failure message."""
    deadline = time.monotonic() + 30
    while (reached := [last_lsn(out) for out in outs]) != [total] * len(outs):
        for name, follower in zip(FOLLOWERS, followers, strict=True):
            assert follower.poll() is None, (
                f"{name} exited with status {follower.returncode}:\n{errors.read_text()}"
            )
        if time.monotonic() > deadline:
            for follower, lsn in zip(followers, reached, strict=True):
                if lsn < total:
                    follower.send_signal(signal.SIGUSR1)
            time.sleep(1)
            pytest.fail(
                "follower stall: "
                + ", ".join(
                    f"{name} at LSN {lsn}" for name, lsn in zip(FOLLOWERS, reached, strict=True)
                )
                + f" after 30 s; the log ends at LSN {total}. Their stacks:\n{errors.read_text()}"
            )
        time.sleep(0.01)
    return reached


def read_all(shard: Path) -> list[Frame]:
    frames: list[Frame] = []
    with ShardReader(shard) as reader:
        reader.seek(1)
        while got := reader.poll(4096):
            frames += got
    return frames


def committed_end(report: VerifyReport) -> int:
    """The LSN after the last committed record of the newest segment (where a torn tail
    starts; ``next_lsn`` is after the LSNs the tail names)."""
    return report.torn_tail_lsns[0] if report.torn_tail_lsns else report.next_lsn


def check_round(run: WriterRun, code: int | None, prev: VerifyReport, now: VerifyReport) -> None:
    """What one writer process left: where it started, what it cut, where the log ends."""
    assert code == (0 if run.mode == "clean" else -signal.SIGKILL), f"writer exit status {code}"
    gap = range((now.last_lsn or 0) + 1, committed_end(now))  # LSNs cut as torn tails
    assert all(any(a <= lsn <= b for a, b in now.discarded) for lsn in gap), now
    if run.opened is None:  # killed before it logged its opening: it appended nothing
        assert now.next_lsn == prev.next_lsn
        assert now.torn_tail_bytes in (0, prev.torn_tail_bytes)
        return
    assert run.opened == (prev.next_lsn, prev.torn_tail_bytes), (
        f"writer {run.generation} opened at LSN {run.opened[0]} after cutting {run.opened[1]} "
        f"bytes; the log ended at LSN {prev.next_lsn - 1} with a torn tail of "
        f"{prev.torn_tail_bytes} bytes"
    )
    returned = run.next_after_appends()
    assert returned is not None
    ends = (
        f"writer {run.generation} ({run.mode}): its appends returned up to LSN {returned - 1}, "
        f"the log ends at LSN {now.next_lsn - 1}"
    )
    if run.mode == "kill":  # at most the append in flight went further than what returned
        assert returned <= now.next_lsn <= returned + MAX_BATCH, ends
        return
    assert committed_end(now) == returned, ends
    if run.mode == "clean":
        assert (run.closed, now.torn_tail_bytes) == (now.next_lsn, 0), ends
    else:
        assert run.tail is not None and run.tail[0] == run.mode, ends
        assert (run.tail[1], run.tail[2]) == (committed_end(now), now.torn_tail_bytes), (
            f"{ends}; it left a {run.mode} tail of {run.tail[2]} bytes at LSN {run.tail[1]}, "
            f"verify_shard found {now.torn_tail_bytes} bytes"
        )


def check_final_log(frames: list[Frame], runs: list[WriterRun]) -> None:
    """Every returned append is there with its content; each generation's records continue
    where the previous generation's end; batches are whole; no torn record is in the log."""
    by_lsn = {frame.lsn: frame for frame in frames}
    for run in runs:
        for first, count, batch, digests in run.appends:
            for i in range(count):
                frame = by_lsn[first + i]
                assert digest(frame.payload) == digests[i], f"LSN {frame.lsn} changed"
                expect = (i, count, FLAG_BATCH) if batch else (0, 1, 0)
                assert (frame.batch_index, frame.batch_size, frame.flags) == expect
    started = {run.generation: run.opened[0] for run in runs if run.opened is not None}
    previous: tuple[int, int] = (0, -1)  # (generation, seq) of the record before
    for frame in frames:
        record = decode_payload(frame.record_type, frame.payload)
        assert isinstance(record, KvCommand)
        command, key, value = record.argv
        assert command == b"SET" and value == make_value(key, len(value)), f"LSN {frame.lsn}"
        generation, seq, index, torn = parse_key(key)
        assert not torn, f"LSN {frame.lsn} holds a record of a torn tail"
        assert index == frame.batch_index, f"LSN {frame.lsn}"
        if generation != previous[0]:  # the first record of a writer: where it opened
            assert generation > previous[0] and (seq, index) == (0, 0), f"LSN {frame.lsn}"
            assert started[generation] == frame.lsn, f"LSN {frame.lsn}, writer {generation}"
        elif index == 0:
            assert seq == previous[1] + 1, f"LSN {frame.lsn}: an append is missing"
        else:
            assert seq == previous[1], f"LSN {frame.lsn}"
        if index + 1 == frame.batch_size:  # the last record of its append
            assert frame.batch_size == 1 or frame.flags & FLAG_BATCH
        previous = (generation, seq)
    assert frames[-1].batch_index + 1 == frames[-1].batch_size


@pytest.mark.timeout(max(300, 60 + 1.5 * ROUNDS))
def test_killed_writers_lose_nothing_and_followers_see_every_record_once(
    tmp_path: Path,
) -> None:
    try:
        run_crash_rounds(tmp_path, ROUNDS, SEED)
    except BaseException:
        print(f"\nreplay: MOONISH_CRASH_SEED={SEED} MOONISH_CRASH_ROUNDS={ROUNDS}")
        raise


def run_writer(
    procs: Children, rng: random.Random, shard: Path, log: Path, generation: int, mode: str
) -> tuple[int, bool]:
    """One writer process, from start to death; returns its exit status and whether it was
    killed at a random moment from its start (rather than after it opened the shard)."""
    writer = procs.start(
        "writer", str(shard), str(rng.getrandbits(32)), str(generation), str(log), mode
    )
    early = mode == "kill" and rng.random() < 0.15
    if early:  # anywhere: starting up, recovering the log, appending
        time.sleep(rng.uniform(0.02, 0.3))
    elif mode == "kill":

        def opened() -> bool:
            return (log.exists() and log.stat().st_size > 0) or writer.poll() is not None

        wait_for(opened, 30, f"writer {generation} to open the shard")
        time.sleep(rng.uniform(0, 0.06))
    if mode == "kill":
        writer.send_signal(signal.SIGKILL)
    return writer.wait(timeout=60), early


def run_crash_rounds(tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    shard, errors = tmp_path / "shard-0", tmp_path / "children.err"
    WalWriter(shard, WriterOptions(segment_bytes=4096, fsync=FsyncPolicy.NEVER)).close()
    report = verify_shard(shard)
    frames_out, events_out = tmp_path / "frames.out", tmp_path / "events.out"
    runs: list[WriterRun] = []
    counts = dict.fromkeys(("kill", "torn", "zero", "clean", "real_torn", "killed_early"), 0)
    started, verifying = time.monotonic(), 0.0
    with children(errors) as procs:
        followers = [
            procs.start("frames", str(shard), str(frames_out)),
            procs.start("events", str(shard), str(events_out)),
        ]
        for generation in range(1, rounds + 1):
            mode = rng.choices(list(MODE_WEIGHTS), list(MODE_WEIGHTS.values()))[0]
            mode = "clean" if generation == rounds else mode  # the last writer closes
            log = tmp_path / f"writer-{generation}.log"
            code, early = run_writer(procs, rng, shard, log, generation, mode)
            counts[mode] += 1
            counts["killed_early"] += early
            assert errors.stat().st_size == 0, errors.read_text()
            for name, follower in zip(FOLLOWERS, followers, strict=True):
                assert follower.poll() is None, f"{name} exited with {follower.returncode}"
            run = WriterRun.parse(generation, mode, log.read_text() if log.exists() else "")
            runs.append(run)
            checking = time.monotonic()
            now = verify_shard(shard)
            verifying += time.monotonic() - checking
            check_round(run, code, report, now)
            if mode == "kill" and now.torn_tail_bytes:
                counts["real_torn"] += 1  # a SIGKILL that landed inside a write()
            report = now
        total = report.last_lsn or 0
        reached = await_followers(followers, [frames_out, events_out], total, errors)
        for follower in followers:
            assert follower.poll() is None, f"a follower exited with {follower.returncode}"
            follower.send_signal(signal.SIGTERM)
        codes = [follower.wait(timeout=30) for follower in followers]
    elapsed = time.monotonic() - started
    assert errors.stat().st_size == 0, errors.read_text()
    assert codes == [0, 0], codes
    assert reached == [total, total], reached

    frames = read_all(shard)
    lsns = [
        lsn for lsn in range(1, total + 1) if not any(a <= lsn <= b for a, b in report.discarded)
    ]
    assert [frame.lsn for frame in frames] == lsns
    assert verify_shard(shard).records == len(lsns)
    check_final_log(frames, runs)
    expected = [
        f"{f.lsn} {f.batch_index} {f.batch_size} {f.flags} {digest(f.payload)}" for f in frames
    ]
    seen = frames_out.read_text().splitlines()
    assert seen == expected, "the ShardReader follower saw other records"
    events = events_out.read_text().splitlines()
    assert [line.split()[0] for line in events] == [str(lsn) for lsn in lsns]
    assert [line.split()[2] for line in events] == [digest(f.payload) for f in frames], (
        "the moonish.tail follower saw other records"
    )
    print(
        f"\ncrash test: seed {seed}, {rounds} writer processes in {elapsed:.1f} s "
        f"({verifying:.1f} s in verify_shard): "
        f"{counts['kill']} SIGKILLs ({counts['killed_early']} at any moment from start, "
        f"{counts['real_torn']} left a torn tail), {counts['torn']} torn-write simulations, "
        f"{counts['zero']} zero-fill simulations, {counts['clean']} clean closes; "
        f"{report.segments} segments ({report.segments - 1} rotations), {total} records, "
        f"{sum(1 for run in runs for a in run.appends)} appends returned; follower events: "
        f"{len(seen)} frames (ShardReader), {len(events)} events (moonish.tail)"
    )
