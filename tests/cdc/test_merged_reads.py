"""Merged reads over a data directory: tokens, commit-time order, resuming, resolved markers,
monotone commit times and closed time, errors that name the oldest token, and a tail's token
that moves past records of a disabled stream."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import moonish
from cli.main import main
from moonish.cdc import merged
from moonish.cdc.merged import Resolved
from moonish.cdc.merged_read import MergedTail, read_merged
from moonish.cdc.token import Token
from moonish.clock import FixedClock
from moonish.errors import InvalidArgumentError, PositionNotRetainedError
from moonish.log.heartbeat import load_closed_time
from moonish.log.records import KvChange, ViewType
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from tests.support.steps import Step, write_steps
from tests.support.wal import START_US, kv, writer_at


def expected_order(data: Path, shards: int) -> list[tuple[int, int, int]]:
    """Every record as (commit_us, shard, lsn), read shard by shard, in (commit, shard, LSN)
    order: what a merged read must give for a log that is not being written."""
    rows = []
    for k in range(shards):
        with moonish.tail(data / f"shard-{k}") as stream:
            rows += [(e.commit_us, e.shard, e.lsn) for e in stream]
    return sorted(rows)


def read_all(data: Path, start: str | Token, limit: int) -> tuple[list, list[Token]]:
    rows, tokens, token = [], [], start
    while True:
        result = read_merged(data, token, limit)
        if not result.events:
            assert result.token == (token if isinstance(token, Token) else result.token)
            return rows, tokens
        rows += [(e.commit_us, e.shard, e.lsn) for e in result.events]
        tokens.append(result.token)
        token = result.token


steps_strategy = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from([1, 1, 1, 2, 3]), st.sampled_from([0, 1, 7])),
    min_size=1,
    max_size=60,
)


@pytest.mark.parametrize("events_per_run", [1, 10**9], ids=["runs", "sort"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=steps_strategy, limit=st.integers(1, 9), data=st.data())
@pytest.mark.slow
def test_resuming_from_any_token_gives_exactly_the_rest(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    events_per_run: int,
    steps: list[Step],
    limit: int,
    data: st.DataObject,
) -> None:
    """Both ways the merge orders events: by runs of one shard (found by bisecting commit
    times) and by one sort of all events (when shards interleave finely)."""
    monkeypatch.setattr(merged, "_EVENTS_PER_RUN", events_per_run)
    root = tmp_path_factory.mktemp("merged")
    write_steps(root, 3, steps, segment_bytes=300)
    expected = expected_order(root, 3)
    rows, tokens = read_all(root, "earliest", limit)
    assert rows == expected  # each change once, in (commit time, shard) order
    texts = [str(token) for token in tokens]
    assert texts == sorted(texts)  # a later token never sorts before an earlier one
    assert [Token.parse(text, 3) for text in texts] == tokens
    if tokens:
        pick = data.draw(st.integers(0, len(tokens) - 1))
        done = sum(1 for row in rows[: _emitted_before(rows, tokens[pick])])
        rest, _ = read_all(root, str(tokens[pick]), data.draw(st.integers(1, 9)))
        assert rest == expected[done:]
    with MergedTail(root) as stream:  # the iterator: same order, per-event tokens
        events, event_tokens = [], []
        for event in stream:
            events.append(event)
            event_tokens.append(stream.token)
        assert [(e.commit_us, e.shard, e.lsn) for e in events] == expected
        assert stream.token == (tokens[-1] if tokens else Token.start(3))
    if event_tokens:  # resuming from the token after any event gives exactly the rest
        pick = data.draw(st.integers(0, len(event_tokens) - 1))
        rest, _ = read_all(root, event_tokens[pick], 1000)
        assert rest == expected[pick + 1 :]


def _emitted_before(rows: list[tuple[int, int, int]], token: Token) -> int:
    """How many of ``rows`` a token covers (each shard's LSNs up to its component)."""
    return sum(1 for _, shard, lsn in rows if lsn <= token.positions[shard])


def test_atomic_batches_stay_whole_and_the_limit_never_cuts_one(tmp_path: Path) -> None:
    write_steps(tmp_path, 2, [(0, 3, 1), (1, 1, 0), (1, 4, 0), (0, 1, 1)])
    result = read_merged(tmp_path, "earliest", 2)
    # shard 0's batch of 3 comes first (earliest commit time) and is not cut at 2
    assert [(e.shard, e.lsn) for e in result.events] == [(0, 1), (0, 2), (0, 3)]
    assert str(result.token) == "m2.a3.a0"
    result = read_merged(tmp_path, result.token, 2)
    assert [(e.shard, e.lsn) for e in result.events] == [(1, 1), (1, 2), (1, 3), (1, 4), (1, 5)]
    with_txn = read_merged(tmp_path, "earliest", 1, transactions=True)
    assert with_txn.events.ops == ["BEGIN", "u", "u", "u", "END"]


def test_tokens_are_checked_and_earliest_now_resolve(tmp_path: Path) -> None:
    write_steps(tmp_path, 2, [(0, 1, 1), (1, 1, 1), (1, 1, 1)])
    assert read_merged(tmp_path, "now", 10).token == Token((1, 2))
    assert not read_merged(tmp_path, "now", 10).events
    assert len(read_merged(tmp_path, "earliest", 10).events) == 3
    for bad, message in [
        ("m3.a0.a0.a0", "for 3 shards; this data directory has 2"),
        ("m2.a0", "says 2 shards but holds 1"),
        ("m2.b1.a0", "bad token position"),
        ("m2.b01.a0", "bad token position"),
        ("x2.a0.a0", "a token looks like"),
        ("m2.a9.a0", "beyond"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            read_merged(tmp_path, bad, 10)


def test_cli_reads_a_data_directory_and_a_cursor_file_keeps_stdout_pure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_steps(tmp_path / "data", 2, [(0, 1, 1), (1, 1, 1), (0, 1, 1)])
    data = str(tmp_path / "data")
    assert main(["cdc", "read", data, "earliest", "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "m2.a1.a1" and len(lines) == 3
    assert main(["cdc", "read", data, lines[0], "--cursor-file", str(tmp_path / "pos")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [orjson.loads(line)["source"]["lsn"] for line in out] == [2]  # only NDJSON
    assert (tmp_path / "pos").read_text() == "m2.a2.a1\n"
    assert main(["cdc", "read", data, "m3.a0.a0.a0"]) == 2
    assert main(["cdc", "tail", data, "--from", "m2.a1.a0"]) == 0
    tailed = capsys.readouterr().out.splitlines()
    assert [orjson.loads(line)["source"]["shard"] for line in tailed] == [1, 0]


def test_a_removed_position_names_the_oldest_token_and_the_gap(tmp_path: Path) -> None:
    write_steps(tmp_path, 2, [(0, 1, 1)] * 40 + [(1, 1, 1)] * 3, segment_bytes=400)
    shard0 = tmp_path / "shard-0"
    segments = sorted(shard0.glob("*.seg"))
    assert len(segments) > 2
    oldest_kept = int(segments[1].stem)
    for path in [segments[0], *shard0.glob(f"{segments[0].stem}.idx")]:
        path.unlink()
    with pytest.raises(PositionNotRetainedError) as info:
        read_merged(tmp_path, "m2.a0.a0", 10)
    error = info.value
    assert error.kind == "not_retained" and error.shard == 0
    assert error.oldest_token == f"m2.{_component(oldest_kept - 1)}.a0"
    assert error.gone == oldest_kept - 1
    assert error.oldest_token in str(error)
    assert main(["cdc", "read", str(tmp_path), "m2.a0.a0"]) == 3
    with (
        MergedTail(tmp_path, "m2.a0.a0", follow=True, watch=False) as stream,
        pytest.raises(PositionNotRetainedError),  # a follower ends, it never stalls
    ):
        next(stream)
    assert read_merged(tmp_path, "earliest", 100).events  # earliest reads what is left


def _component(lsn: int) -> str:
    return "abcdefghijklmnopqrst"[len(str(lsn)) - 1] + str(lsn)


def test_commit_times_never_decrease_and_closed_time_survives_a_restart(
    tmp_path: Path,
) -> None:
    clock = FixedClock(START_US)
    options = WriterOptions(fsync=FsyncPolicy.NEVER, heartbeat_ms=None)
    with WalWriter(tmp_path, options, clock) as writer:
        writer.append(kv(b"a"))
        clock.advance(-500)  # the clock steps back
        writer.append(kv(b"b"))
        clock.advance(2000)
        closed = writer.heartbeat()
        assert closed == START_US + 1500
    promise = load_closed_time(str(tmp_path))
    assert promise is not None and promise.next_lsn == 3 and promise.closed_us >= closed
    clock.advance(-10_000)  # a new writer whose clock is behind the promise
    with WalWriter(tmp_path, options, clock) as writer:
        writer.append(kv(b"c"))
    commits = [e.commit_us for e in moonish.tail(tmp_path, 0)]
    assert commits == [START_US, START_US, promise.closed_us]


def test_resolved_markers_hold_across_live_shards_and_pass_idle_ones(tmp_path: Path) -> None:
    writers = [
        WalWriter(
            tmp_path / f"shard-{k}", WriterOptions(k, fsync=FsyncPolicy.NEVER, heartbeat_ms=20)
        )
        for k in range(3)
    ]
    items: list[object] = []
    try:
        with MergedTail(tmp_path, follow=True, resolved_ms=5, fallback_poll_ms=20) as stream:
            reader = threading.Thread(target=lambda: items.extend(stream))
            reader.start()
            for n in range(300):  # shard 2 stays idle after its first record
                writers[n % 2 if n else 2].append(kv(f"k{n}".encode()))
                if n % 50 == 0:
                    time.sleep(0.01)
            last_commit = max(e.commit_us for e in moonish.tail(tmp_path / "shard-0", 0))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not any(
                isinstance(i, Resolved) and i.ts_us > last_commit for i in items
            ):
                time.sleep(0.02)
            stream.close()
            reader.join(10)
    finally:
        for writer in writers:
            writer.close()
    events = [i for i in items if not isinstance(i, Resolved)]
    assert sorted((e.shard, e.lsn) for e in events) == sorted(
        [(2, 1)] + [(0, lsn) for lsn in range(1, 150)] + [(1, lsn) for lsn in range(1, 151)]
    )
    for k in range(3):  # each shard in LSN order
        assert [e.lsn for e in events if e.shard == k] == sorted(
            e.lsn for e in events if e.shard == k
        )
    markers = [(n, i) for n, i in enumerate(items) if isinstance(i, Resolved)]
    assert markers, "no resolved marker"
    for n, marker in markers:  # no change after a marker has an earlier commit time
        later = [e.commit_us for e in items[n + 1 :] if not isinstance(e, Resolved)]
        assert all(commit >= marker.ts_us for commit in later)
    stamps = [m.ts_us for _, m in markers]
    assert stamps == sorted(set(stamps))
    # the idle shard 2 did not hold the watermark back: closed time moved it past shard 0's end
    assert stamps[-1] > last_commit


def test_the_api_dispatches_shards_and_data_directories(tmp_path: Path) -> None:
    write_steps(tmp_path, 2, [(0, 1, 1), (1, 1, 1)])
    shard = moonish.read(tmp_path / "shard-0", 0)
    assert isinstance(shard, moonish.ReadResult) and shard.cursor.lsn == 2
    merged = moonish.read(tmp_path, "earliest")
    assert isinstance(merged, moonish.MergedResult) and str(merged.token) == "m2.a1.a1"
    one = moonish.read(tmp_path / "shard-1", "m1.a0")  # a token over one shard directory
    assert isinstance(one, moonish.MergedResult) and str(one.token) == "m1.a1"
    with pytest.raises(InvalidArgumentError, match="snapshot"):
        moonish.read(tmp_path, "earliest", snapshot=True)
    assert os.path.isdir(tmp_path / "shard-1")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rounds=st.lists(
        st.lists(
            st.tuples(
                st.integers(0, 2), st.sampled_from([0, 1, 1, 2]), st.sampled_from([0, 1, 50, -30])
            ),
            max_size=8,
        ),
        min_size=1,
        max_size=8,
    )
)
@pytest.mark.slow
def test_resolved_markers_never_precede_an_earlier_change(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    rounds: list[list[Step]],
) -> None:
    """Writers append (size > 0) or close time (size 0) between reads of one live stream;
    every marker's promise holds for everything that comes after it."""
    root = tmp_path_factory.mktemp("resolved")
    ticks = iter(range(10**9))
    monkeypatch.setattr("moonish.cdc.merged_read.time.monotonic", lambda: next(ticks))
    monkeypatch.setattr("moonish.cdc.merged_read.TAIL_BATCH_RECORDS", 2)  # many rounds
    clock = FixedClock(START_US)
    options = [WriterOptions(k, fsync=FsyncPolicy.NEVER, heartbeat_ms=None) for k in range(3)]
    writers = [WalWriter(root / f"shard-{k}", options[k], clock) for k in range(3)]
    items: list[object] = []
    try:
        with MergedTail(root, resolved_ms=1) as stream:
            for steps in rounds:
                for shard, size, advance in steps:
                    clock.advance(advance)
                    if size == 0:
                        writers[shard].heartbeat()
                    else:
                        writers[shard].append_batch([kv(b"k")] * size)
                for batch in stream.batches():  # to the current end; the next call goes on
                    items.extend([batch] if isinstance(batch, Resolved) else list(batch))
    finally:
        for writer in writers:
            writer.close()
    events = [(i.shard, i.lsn) for i in items if not isinstance(i, Resolved)]
    written = {k: moonish.info(root / f"shard-{k}")["next_lsn"] - 1 for k in range(3)}
    assert sorted(events) == [(k, lsn) for k in range(3) for lsn in range(1, written[k] + 1)]
    stamps = []
    for n, item in enumerate(items):
        if isinstance(item, Resolved):
            stamps.append(item.ts_us)
            later = [e.commit_us for e in items[n + 1 :] if not isinstance(e, Resolved)]
            assert all(commit >= item.ts_us for commit in later), (item, later)
    assert stamps == sorted(set(stamps))


def _stream_off(n: int) -> KvChange:
    """A change written while the shard's stream was off: no event, but an LSN."""
    return KvChange("u", 0, b"SET", f"off{n}".encode(), b"", b"", ViewType.OFF)


# -- a tail's token moves past records of a disabled stream ------------------------------------
def test_the_tail_token_moves_past_records_of_a_disabled_stream(tmp_path: Path) -> None:
    """Records written with the stream off produce no event but must move the position, in
    read_merged and in MergedTail alike, also for a round that found only such records: a
    token left behind after a full poll of events followed by stream-off records (what `cdc
    tail --cursor-file` writes and `--ack` confirms) would leave a caught-up consumer with lag,
    pinning the log until max_pinned_bytes marks it lost."""
    shard = tmp_path / "shard-0"
    with writer_at(shard, 0, FixedClock(START_US, 1)) as writer:
        for n in range(1024):  # one full poll of events (TAIL_BATCH_RECORDS)
            writer.append(kv(f"k{n}".encode()))
        for n in range(3):
            writer.append(_stream_off(n))
    expected = read_merged(tmp_path, "earliest", 10_000).token
    assert str(expected) == "m1.d1027"
    with MergedTail(tmp_path, "earliest") as stream:
        assert sum(1 for _ in stream) == 1024
        assert stream.token == expected
    with MergedTail(tmp_path, "earliest") as stream:
        for _ in stream.batches():
            pass
        assert stream.token == expected
