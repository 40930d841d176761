"""Following a live log: in-process iterator, close from another thread, and a writer process
with a follower process running at once across segment rotations."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from moonish.cdc import follow, shard_read
from moonish.cdc.events import ChangeEvent
from moonish.cdc.follow import ChangeSignal
from tests.support.wal import kv, open_writer

WRITER = """
import sys, time
from moonish.log.records import KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
options = WriterOptions(segment_bytes=2000, fsync=FsyncPolicy.NEVER)
with WalWriter(sys.argv[1], options) as writer:
    for i in range(int(sys.argv[2])):
        if i % 5 == 0:
            pair = [KvCommand(0, (b"DEL", b"a%d" % i)), KvCommand(0, (b"DEL", b"b%d" % i))]
            writer.append_batch(pair)
        else:
            writer.append(KvCommand(0, (b"SET", b"k%d" % i, b"v" * (i % 50))))
        if i % 20 == 0:
            time.sleep(0.002)
"""


def collect(stream: shard_read.Tail, count: int, into: list[ChangeEvent]) -> None:
    for event in stream:
        into.append(event)
        if len(into) == count:
            return


@pytest.mark.parametrize("watch", [True, False])
def test_follow_sees_appends_and_rotations(shard: Path, watch: bool) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        writer.append(kv(b"first"))
        got: list[ChangeEvent] = []
        with shard_read.tail(shard, 0, follow=True, watch=watch, fallback_poll_ms=20) as stream:
            consumer = threading.Thread(target=collect, args=(stream, 41, got))
            consumer.start()
            for i in range(40):
                writer.append(kv(b"key-%d" % i))
                time.sleep(0.001)
            consumer.join(timeout=20)
            assert not consumer.is_alive()
            assert stream.cursor.lsn == 42
    assert [e.lsn for e in got] == list(range(1, 42))
    assert len(list(shard.glob("*.seg"))) > 3


def test_close_from_another_thread_ends_a_blocked_follow_promptly(shard: Path) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"only"))
    stream = shard_read.tail(shard, 2, follow=True, fallback_poll_ms=60_000)
    finished = threading.Event()

    def consume() -> None:
        for _ in stream:
            pass
        finished.set()

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.2)
    assert not finished.is_set()  # blocked waiting for records
    started = time.monotonic()
    stream.close()
    assert finished.wait(5)
    assert time.monotonic() - started < 2
    consumer.join()


def test_without_follow_the_iterator_ends_at_the_end(shard: Path) -> None:
    with open_writer(shard) as writer:
        writer.append_batch([kv(b"a"), kv(b"b")])
    with shard_read.tail(shard, 0) as stream:
        assert [e.lsn for e in stream] == [1, 2]
        assert stream.cursor.lsn == 3


@pytest.mark.slow
def test_writer_process_and_follower_process_at_once(tmp_path: Path) -> None:
    shard, total_commands = tmp_path / "shard-0", 400
    expected = total_commands + total_commands // 5  # every fifth command is a batch of two
    open_writer(shard).close()  # a shard with no record yet (a directory with no log is refused)
    follower = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from cli.main import entry; entry()",
            "cdc",
            "tail",
            str(shard),
            "--follow",
            "--poll-ms",
            "50",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with follower:
        time.sleep(0.3)
        writer = subprocess.run(
            [sys.executable, "-c", WRITER, str(shard), str(total_commands)], timeout=60, check=True
        )
        assert writer.returncode == 0
        assert follower.stdout is not None
        lsns = [orjson.loads(follower.stdout.readline())["source"]["lsn"] for _ in range(expected)]
        follower.terminate()
        follower.communicate(timeout=10)
    assert lsns == list(range(1, expected + 1))
    assert len(list(shard.glob("*.seg"))) > 5


def test_close_from_another_thread_and_the_with_block_release_once(shard: Path) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"only"))
    for _ in range(25):  # a race shows up as an unhandled thread exception (an error here)
        with shard_read.tail(shard, 0, follow=True, fallback_poll_ms=5) as stream:
            closer = threading.Timer(0.01, stream.close)
            closer.start()
            assert [e.lsn for e in stream] == [1]
        closer.join()
        stream.close()


def test_watchdogs_benign_stop_race_error_is_not_printed(
    shard: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """watchdog logs an error when an observer stops while its emitter reads an event (seen
    on a follower's SIGTERM in tests/log/test_killed_writers.py at 1,000 rounds); nothing is
    wrong."""
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))
    signal = ChangeSignal(str(shard), 50, watch=True)
    signal.close()
    logger = logging.getLogger("watchdog.observers.inotify")
    with caplog.at_level(logging.ERROR, logger="watchdog.observers.inotify"):
        logger.error("InotifyEmitter.queue_events() called when the thread is inactive")
        logger.error("another inotify error")
    assert [record.getMessage() for record in caplog.records] == ["another inotify error"]


def test_an_inotify_overflow_wakes_every_follower_instead_of_printing(
    shard: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Seen in tests/log/test_killed_writers.py at 1,000 rounds (thousands of segment files):
    the kernel's inotify queue overflowed and watchdog warned that events were lost."""
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))
    signal = ChangeSignal(str(shard), 60_000, watch=True)
    try:
        signal.clear()
        logger = logging.getLogger("watchdog.observers.inotify_c")
        with caplog.at_level(logging.WARNING, logger="watchdog.observers.inotify_c"):
            logger.warning("Inotify queue overflowed; filesystem events were lost")
        assert caplog.records == []
        assert signal.wait()  # at once, not after the 60 s fallback
    finally:
        signal.close()


def test_a_busy_follower_stops_watching_and_watches_again_before_it_waits(shard: Path) -> None:
    """A follower that keeps finding changes needs no events: after IDLE_WATCH_POLLS polls
    without a wait the directory is not watched (appends cost no watchdog work), and the
    next wait watches it again and returns at once, so the follower polls before it waits."""
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))
    signal = ChangeSignal(str(shard), 60_000, watch=True)
    try:
        assert signal.watching and len(signal._watches) == 1
        for _ in range(follow.IDLE_WATCH_POLLS):
            signal.clear()  # polls that each found a change: no wait between them
        assert signal._watches == []
        with open_writer(shard) as writer:
            writer.append(kv(b"b"))  # made while nothing watches
        assert not signal._event.is_set()  # no event came for it
        started = time.monotonic()
        assert signal.wait()  # watches again, returns at once: poll now
        assert time.monotonic() - started < 5 and len(signal._watches) == 1
        signal.clear()  # the poll (finds "b"), then a real wait that an append ends

        def append_later() -> None:
            time.sleep(0.2)
            with open_writer(shard) as writer:
                writer.append(kv(b"c"))

        appender = threading.Thread(target=append_later)
        appender.start()
        assert signal.wait()
        appender.join()
        assert time.monotonic() - started < 30
    finally:
        signal.close()
