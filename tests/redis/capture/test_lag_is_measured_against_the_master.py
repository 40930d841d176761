"""How far a capture is behind is measured against the master's ``master_repl_offset``
(moonish.redis.capture.behind), not as received minus durable: bytes and seconds behind from
the master's answers, unknown (never negative) while the master does not answer or follows
another stream; against a real redis-server, the report and ``capture.json`` show the bytes
the durable offset is behind while the capture is held back, 0 once caught up, and null
with Redis down."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from pathlib import Path

import pytest
import redis

from moonish.redis.capture.behind import Behind
from moonish.redis.capture.status import CaptureReport, read_status
from moonish.redis.replication.messages import ReplicationRefusedError
from moonish.redis.replication.probe import MasterProbe, MasterStream, parse_replication_info
from moonish.redis.replication.resp import ReplicationProtocolError
from tests.support.redis.capture import Running, master_offset, url_of, wait_for
from tests.support.servers.redis_server import redis_server

A, B = "a" * 40, "b" * 40
NONE = "0" * 40


def stream(offset: int, replid: str = A, replid2: str = NONE) -> MasterStream:
    return MasterStream(replid, offset, replid2, -1)


def test_bytes_behind_are_the_masters_offset_less_the_durable_one() -> None:
    behind = Behind()
    behind.record(1_000_000, stream(500))
    lag = behind.measure(A, 200, 1_000_000)
    assert (lag.master_offset, lag.bytes_behind, lag.error) == (500, 300, None)


def test_seconds_behind_are_the_age_of_the_oldest_answer_not_yet_durable() -> None:
    behind = Behind()
    behind.record(10_000_000, stream(100))  # caught up here
    behind.record(11_000_000, stream(300))  # the master moved on
    behind.record(12_000_000, stream(300))  # (the same offset: the first time counts)
    behind.record(13_000_000, stream(700))
    assert behind.measure(A, 100, 14_000_000).seconds_behind == 3.0
    assert behind.measure(A, 300, 14_000_000).seconds_behind == 1.0
    caught_up = behind.measure(A, 700, 14_000_000)
    assert (caught_up.bytes_behind, caught_up.seconds_behind) == (0, 0.0)


def test_a_durable_offset_past_the_last_answer_is_not_negative() -> None:
    behind = Behind()
    behind.record(0, stream(100))
    lag = behind.measure(A, 150, 1)  # the capture received more since the master answered
    assert (lag.bytes_behind, lag.seconds_behind) == (0, 0.0)


def test_a_master_that_does_not_answer_is_unknown_not_negative() -> None:
    behind = Behind()
    assert behind.measure(A, 0, 0).bytes_behind is None  # not asked yet
    behind.record(0, stream(100))
    behind.unknown("cannot connect to Redis: refused")
    lag = behind.measure(A, 50, 1)
    assert (lag.master_offset, lag.bytes_behind, lag.seconds_behind) == (None, None, None)
    assert lag.error == "cannot connect to Redis: refused"


def test_another_stream_is_unknown_until_the_capture_follows_it() -> None:
    behind = Behind()
    behind.record(0, stream(100, B))
    lag = behind.measure(A, 50, 1)
    assert lag.bytes_behind is None and lag.master_offset == 100 and B in str(lag.error)
    assert behind.measure(B, 50, 1).bytes_behind == 50


def test_after_a_failover_the_previous_replid_still_compares() -> None:
    behind = Behind()
    behind.record(0, stream(900, B, replid2=A))
    assert behind.measure(A, 800, 1).bytes_behind == 100


def test_info_replication_is_parsed() -> None:
    text = (
        b"# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"
        b"master_replid:" + A.encode() + b"\r\nmaster_replid2:" + B.encode() + b"\r\n"
        b"master_repl_offset:12345\r\nsecond_repl_offset:100\r\n"
    )
    assert parse_replication_info(text, "redis://h:1") == MasterStream(A, 12345, B, 100)
    with pytest.raises(ReplicationProtocolError, match="master_repl_offset"):
        parse_replication_info(b"# Replication\r\nrole:master\r\n", "redis://h:1")


@pytest.mark.redis
def test_the_probe_answers_what_info_replication_says(workdir: Path) -> None:
    with redis_server(workdir) as client, MasterProbe(url_of(client)) as probe:
        client.set("k", "v")
        answered = probe.ask()
        info = client.info("replication")
        assert answered.replid == info["master_replid"]
        assert answered.offset == info["master_repl_offset"]


@pytest.mark.redis
def test_a_pipeline_of_the_probe_reads_every_reply_in_order(workdir: Path) -> None:
    """Replies that arrive together (more than one read's worth) each go to their command;
    an error reply raises, and the next command connects again."""
    with redis_server(workdir) as client, MasterProbe(url_of(client)) as probe:
        client.mset({f"k{n}": "v" for n in range(0, 3000, 2)})
        replies = probe.pipeline([(b"EXISTS", b"k%d" % n) for n in range(3000)])
        assert replies == [1 - n % 2 for n in range(3000)]
        with pytest.raises(ReplicationRefusedError):
            probe.pipeline([(b"EXISTS", b"k0"), (b"NOSUCHCOMMAND",), (b"EXISTS", b"k2")])
        assert probe.pipeline([(b"EXISTS", b"k2"), (b"EXISTS", b"k3")]) == [1, 0]


def checked(report: CaptureReport) -> None:
    """What every report says: bytes behind are the master's offset less the durable one."""
    if report.bytes_behind is None:
        assert report.seconds_behind is None and report.master_error
    else:
        assert report.master_offset is not None and report.seconds_behind is not None
        assert report.bytes_behind == max(0, report.master_offset - report.durable_offset)
        assert report.seconds_behind >= 0


@pytest.mark.redis
def test_a_capture_held_back_reports_the_bytes_and_seconds_it_is_behind(
    tmp_path: Path, workdir: Path
) -> None:
    """The capture's thread is held in its progress callback while 4 MB are written; the
    first report after it goes on shows it behind by what it has not made durable, for about
    as long as it was held, and 0 once it caught up."""
    hold, released = threading.Event(), threading.Event()
    reports: list[CaptureReport] = []

    def progress(report: CaptureReport) -> None:
        reports.append(dataclasses.replace(report))
        checked(report)
        if hold.is_set():
            hold.clear()
            released.wait(30)

    data_dir = tmp_path / "data"
    with (
        redis_server(workdir) as client,
        Running(client, data_dir, 2, progress=progress) as running,
    ):
        running.caught_up(client)
        wait_for(lambda: running.report is not None and running.report.bytes_behind == 0, "0")
        hold.set()
        wait_for(lambda: not hold.is_set(), "the capture to be held")
        held_from = len(reports)
        with client.pipeline(transaction=False) as pipe:
            for i in range(4000):
                pipe.set(f"k{i}", "x" * 1000)
            pipe.execute()
        final = master_offset(client)
        threading.Event().wait(1.5)  # the side connection keeps asking meanwhile
        released.set()
        running.caught_up(client)
        after = reports[held_from:]
        assert after, "no report after the capture was let go"
        first = after[0]
        assert first.master_offset == final
        assert first.bytes_behind is not None and first.bytes_behind > 0
        assert first.durable_offset + first.bytes_behind == final
        assert first.seconds_behind is not None and first.seconds_behind >= 0.5
        assert first.pending_bytes >= 0
        wait_for(
            lambda: (
                running.report is not None
                and running.report.bytes_behind == 0
                and running.report.seconds_behind == 0
            ),
            "the capture to say it caught up",
        )
        status = read_status(str(data_dir))
        assert status is not None and status["link"] == "connected"
        assert status["bytes_behind"] is not None and status["master_offset"] is not None
        running.finish()
    stopped = read_status(str(data_dir))
    assert stopped is not None and stopped["link"] == "stopped" and stopped["running"] is False


@pytest.mark.redis
def test_with_redis_down_the_lag_is_unknown_and_the_link_reconnecting(
    tmp_path: Path, workdir: Path
) -> None:
    data_dir = tmp_path / "data"
    with redis_server(workdir) as client, Running(client, data_dir, 2) as running:
        running.caught_up(client)
        client.set("last", "1")
        running.caught_up(client)
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(nosave=True)

        def down() -> bool:
            status = read_status(str(data_dir)) or {}
            return status.get("link") == "reconnecting" and status.get("bytes_behind") is None

        wait_for(down, "capture.json to say reconnecting")
        status = read_status(str(data_dir))
        assert status is not None
        assert status["seconds_behind"] is None and status["master_offset"] is None
        assert status["master_error"] and status["reconnects"] >= 1 and status["last_error"]
        assert status["pending_bytes"] == 0 and status["running"] is True
        assert running.report is not None
        checked(running.report)
        reasons = [event.fields["reason"] for event in running.events if event.kind == "reconnect"]
        assert reasons and all(isinstance(reason, str) and reason for reason in reasons)
