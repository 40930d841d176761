"""``moonish serve``: the feeds of /v1/changes over real HTTP clients (urllib, curl, raw
sockets, aiohttp), heartbeats and timeouts on an injected clock, filters, resolved markers,
errors and the 410 of a removed position."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from moonish.cdc.merged_read import read_merged
from moonish.serve.timer import ManualTimer
from tests.support.servers.serve_util import Running, ndjson, request, rows_of
from tests.support.steps import write_steps


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_steps(tmp_path / "data", 2, [(n % 2, 1 + 2 * (n % 5 == 0), 1) for n in range(30)])
    return tmp_path / "data"


def everything(data: Path) -> list[tuple[int, int]]:
    result = read_merged(data, "earliest", 10_000)
    return [(e.shard, e.lsn) for e in result.events]


def test_normal_pages_through_everything_once_with_last_seq_and_pending(data: Path) -> None:
    expected = everything(data)
    with Running(data) as server:
        seen, since = [], "earliest"
        while True:
            status, page = request(f"{server.url}/v1/changes?since={since}&limit=4")
            assert status == 200
            rows = [
                (r["change"]["source"]["shard"], r["change"]["source"]["lsn"])
                for r in page["results"]
            ]
            if not rows:
                assert page["last_seq"] == since and page["pending"] == 0
                break
            assert page["results"][-1]["seq"] == page["last_seq"]
            assert page["pending"] == len(expected) - len(seen) - len(rows)
            seen += rows
            since = page["last_seq"]
        assert seen == expected


@pytest.mark.slow
def test_continuous_gives_every_change_then_last_seq_and_follows_new_ones(data: Path) -> None:
    expected = everything(data)
    with Running(data) as server:
        lines = ndjson(f"{server.url}/v1/changes?feed=continuous&since=earliest&timeout=300")
        assert rows_of(lines) == expected
        assert lines[-1]["last_seq"] == lines[-2]["seq"] and lines[-1]["pending"] == 0
        url = f"{server.url}/v1/changes?feed=continuous&since=now&limit=2&timeout=20000"
        got: list[list[dict[str, object]]] = []
        reader = threading.Thread(target=lambda: got.append(ndjson(url)))
        reader.start()
        time.sleep(0.5)
        write_steps(data, 2, [(1, 3, 1)])  # an atomic batch, appended to shard 1
        reader.join(20)
        assert [r[0] for r in rows_of(got[0])] == [1, 1, 1]  # the limit never cuts a batch


@pytest.mark.slow
def test_live_feeds_are_written_by_the_ring_in_every_framing(data: Path) -> None:
    """Feeds at the ring's end that take every change are written by the ring as it appends
    (moonish.serve.sink): chunked NDJSON and SSE over HTTP/1.1, raw bytes over HTTP/1.0;
    every change once, in order, then the end of the feed at its timeout."""
    with Running(data) as server:
        base = f"{server.url}/v1/changes?since=now&timeout=4000"
        got: dict[str, bytes] = {}

        def read(name: str, url: str, http10: bool = False) -> None:
            if http10:
                args = ["curl", "-sS", "--http1.0", "--max-time", "30", url]
                got[name] = subprocess.run(args, capture_output=True, check=True).stdout
            else:
                with urllib.request.urlopen(url, timeout=30) as response:
                    got[name] = response.read()

        readers = [
            threading.Thread(target=read, args=("rows", f"{base}&feed=continuous")),
            threading.Thread(target=read, args=("sse", f"{base}&feed=eventsource")),
            threading.Thread(target=read, args=("http10", f"{base}&feed=continuous", True)),
        ]
        for reader in readers:
            reader.start()
        while request(f"{server.url}/v1/info")[1]["server"]["subscribers"] < 3:
            time.sleep(0.05)
        before = read_merged(data, "earliest", 10_000).token
        for n in range(20):
            write_steps(data, 2, [(n % 2, 1 + (n % 3 == 0), 1)])
            time.sleep(0.05)  # separate chunks
        expected = [(e.shard, e.lsn) for e in read_merged(data, before, 10_000).events]
        for reader in readers:
            reader.join(30)
        assert request(f"{server.url}/v1/info")[1]["server"]["carried"] > 0
    for name in ("rows", "http10"):
        lines = [orjson.loads(line) for line in got[name].splitlines() if line.strip()]
        assert in_shard_order(rows_of(lines)) == in_shard_order(expected), name
        assert lines[-1]["last_seq"] == lines[-2]["seq"]
    events = [part for part in got["sse"].split(b"\n\n") if part.startswith(b"id: ")]
    data_lines = [orjson.loads(e.split(b"\ndata: ", 1)[1]) for e in events]
    changes = [(d["source"]["shard"], d["source"]["lsn"]) for d in data_lines if "source" in d]
    assert in_shard_order(changes) == in_shard_order(expected)


def in_shard_order(rows: list[tuple[int, int]]) -> list[list[int]]:
    """Each shard's LSNs in the order received (a live merge may interleave shards
    differently from a later read; each shard's order is the same)."""
    return [[lsn for shard, lsn in rows if shard == k] for k in (0, 1)]


def test_longpoll_waits_for_a_change_and_times_out_on_the_injected_clock(data: Path) -> None:
    timer = ManualTimer()
    with Running(data, timer=timer) as server:
        url = f"{server.url}/v1/changes?feed=longpoll&since=now&timeout=5000"
        answers: list[tuple[int, object]] = []
        waiter = threading.Thread(target=lambda: answers.append(request(url)))
        waiter.start()
        _until(lambda: timer.pending() == 1)
        timer.advance(4999)
        time.sleep(0.3)
        assert not answers  # still waiting
        timer.advance(1)
        waiter.join(10)
        status, body = answers[0]
        assert status == 200 and body["results"] == [] and body["pending"] == 0  # type: ignore[index]
        waiter = threading.Thread(target=lambda: answers.append(request(url)))
        waiter.start()
        _until(lambda: timer.pending() == 1)
        write_steps(data, 2, [(1, 1, 1)])
        waiter.join(10)
        assert [r["change"]["source"]["shard"] for r in answers[1][1]["results"]] == [1]  # type: ignore[index]


def test_heartbeats_keep_an_idle_feed_open_and_headers_go_out_at_once(data: Path) -> None:
    timer = ManualTimer()
    with Running(data, timer=timer) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(
                b"GET /v1/changes?feed=continuous&since=now&heartbeat=1000 HTTP/1.1\r\n"
                b"Host: x\r\n\r\n"
            )
            head = _read_until(sock, b"\r\n\r\n")  # before any heartbeat: the clock stands still
            assert head.startswith(b"HTTP/1.1 200") and b"application/x-ndjson" in head
            _until(lambda: timer.pending() == 1)
            timer.advance(1000)
            assert _read_until(sock, b"\n\r\n") == b"1\r\n\n\r\n"  # one chunk: a newline
            for _ in range(3):  # heartbeat overrides timeout: no end after 60 s
                _until(lambda: timer.pending() == 1)
                timer.advance(30_000)
                assert _read_until(sock, b"\n\r\n") == b"1\r\n\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(
                b"GET /v1/changes?feed=eventsource&since=now&timeout=2000 HTTP/1.1\r\n"
                b"Host: x\r\n\r\n"
            )
            assert b"text/event-stream" in _read_until(sock, b"\r\n\r\n")
            _until(lambda: timer.pending() == 1)
            timer.advance(2000)
            rest = _read_until(sock, b"0\r\n\r\n")
            assert b"event: last_seq" in rest  # the timeout ends it with the position


@pytest.mark.slow
def test_eventsource_ids_are_tokens_and_last_event_id_resumes(data: Path) -> None:
    expected = everything(data)
    with Running(data) as server:
        url = f"{server.url}/v1/changes?feed=eventsource&since=earliest&timeout=300"
        text = subprocess.run(["curl", "-sN", url], capture_output=True, check=True).stdout
        events = [block for block in text.split(b"\n\n") if block.startswith(b"id: ")]
        ids = [block.split(b"\n")[0][4:].decode() for block in events]
        assert len(ids) == len(expected) and ids == sorted(ids)
        pick = ids[len(ids) // 3]
        again = subprocess.run(
            ["curl", "-sN", "-H", f"Last-Event-ID: {pick}", url.replace("earliest", "now")],
            capture_output=True,
            check=True,
        ).stdout
        rest = [
            orjson.loads(b.split(b"data: ", 1)[1])
            for b in again.split(b"\n\n")
            if b.startswith(b"id: ")
        ]
        assert [(e["source"]["shard"], e["source"]["lsn"]) for e in rest] == expected[
            len(ids) // 3 + 1 :
        ]


def test_filters_pass_over_changes_but_move_the_position(data: Path) -> None:
    with Running(data) as server:
        base = f"{server.url}/v1/changes?since=earliest&limit=1000"
        status, page = request(base + "&key_prefix=k1")
        keys = [r["change"]["after"]["key"] for r in page["results"]]
        assert keys and all(key.startswith("k1") for key in keys)
        every = request(base)[1]
        assert (
            status == 200 and page["last_seq"] == every["last_seq"]
        )  # the position passed the others too
        assert request(base + "&db=1")[1]["results"] == []
        assert request(base + "&op=d")[1]["results"] == []
        assert len(request(base + "&type=kv")[1]["results"]) == len(every["results"])
        lines = ndjson(
            f"{server.url}/v1/changes?feed=continuous&since=earliest&timeout=200&key_prefix=nothing"
        )
        assert lines == [{"last_seq": every["last_seq"], "pending": 0}]
        assert request(base + "&type=bogus")[0] == 400
        assert request(base + "&op=x")[0] == 400


@pytest.mark.slow
def test_resolved_markers_come_in_the_stream(data: Path) -> None:
    with Running(data) as server:
        lines = ndjson(
            f"{server.url}/v1/changes?feed=continuous&since=earliest&resolved=10&timeout=1500"
        )
        markers = [line["resolved"] for line in lines if "resolved" in line]
        assert markers and markers[-1]["token"] == lines[-1]["last_seq"]
        change_times = [r["change"]["source"]["ts_us"] for r in lines if "change" in r]
        assert markers[-1]["ts_us"] >= max(change_times)  # writers closed: every change before


def test_errors_are_couchdb_shaped_with_machine_fields(data: Path) -> None:
    with Running(data) as server:
        status, body = request(f"{server.url}/v1/changes?since=m3.a0.a0.a0")
        assert status == 400 and body["error"] == "bad_request" and "3 shards" in body["reason"]
        assert request(f"{server.url}/v1/changes?since=m2.e99999.a0")[0] == 400  # past the end
        assert request(f"{server.url}/v1/changes?bogus=1")[0] == 400
        status, body = request(f"{server.url}/v1/changes?consumer=nobody")
        assert (status, body["error"], body["consumer"]) == (404, "not_found", "nobody")
        assert request(f"{server.url}/v1/nothing")[0] == 404
        status, body = request(f"{server.url}/v1/info", method="POST", body={})
        assert status == 405 and body["error"] == "method_not_allowed"


def test_a_removed_position_is_410_with_the_oldest_token_and_the_gap(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_steps(data, 2, [(0, 1, 1)] * 40 + [(1, 1, 1)] * 3, segment_bytes=400)
    shard0 = data / "shard-0"
    first = sorted(shard0.glob("*.seg"))[0]
    for path in [first, *shard0.glob(f"{first.stem}.idx")]:
        path.unlink()
    with Running(data) as server:
        status, body = request(f"{server.url}/v1/changes?since=m2.a0.a0")
        assert status == 410 and body["error"] == "not_retained"
        assert body["gone"] > 0 and body["oldest_token"].startswith("m2.")
        status, page = request(f"{server.url}/v1/changes?since={body['oldest_token']}&limit=1000")
        assert status == 200 and len(page["results"]) == 43 - body["gone"]


def test_info_lists_shards_tokens_consumers_and_the_ring(data: Path) -> None:
    with Running(data) as server:
        assert (
            request(f"{server.url}/v1/consumers", "POST", {"name": "c", "from": "earliest"})[0]
            == 201
        )
        status, info = request(f"{server.url}/v1/info")
        assert status == 200 and len(info["shards"]) == 2
        assert info["earliest"] == "m2.a0.a0" and info["now"] == everything_token(data)
        assert [c["name"] for c in info["consumers"]] == ["c"]
        assert info["server"]["ring"]["last_token"] == info["now"]


def everything_token(data: Path) -> str:
    return str(read_merged(data, "earliest", 10_000).token)


def test_consumers_over_http_create_list_ack_seek_drop(data: Path) -> None:
    with Running(data) as server:
        url = f"{server.url}/v1/consumers"
        status, made = request(url, "POST", {"name": "billing", "from": "earliest"})
        assert status == 201 and made["token"] == "m2.a0.a0"
        assert request(url, "POST", {"name": "billing"})[0] == 409
        _, page = request(f"{server.url}/v1/changes?consumer=billing&limit=5")
        status, acked = request(f"{url}/billing/ack", "POST", {"token": page["last_seq"]})
        assert status == 200 and acked["token"] == page["last_seq"]
        _, again = request(f"{server.url}/v1/changes?consumer=billing&limit=5")
        assert again["results"][0]["seq"] > page["last_seq"]
        _, table = request(url)
        assert table["consumers"][0]["lag_records"] > 0
        assert request(f"{url}/billing/seek", "POST", {"position": "now"})[1]["token"] == (
            everything_token(data)
        )
        assert request(f"{url}/billing")[1]["lag_records"] == 0
        assert request(f"{url}/billing", "DELETE")[1] == {"name": "billing", "dropped": True}
        assert request(f"{url}/billing")[0] == 404
        assert request(f"{url}/bad%20name!/ack", "POST", {"token": "now"})[0] == 400


def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def _read_until(sock: socket.socket, end: bytes) -> bytes:
    got = b""
    while not got.endswith(end):
        chunk = sock.recv(1)
        if not chunk:
            break
        got += chunk
    return got


def test_headers_arrive_before_any_change_over_urllib(data: Path) -> None:
    with Running(data) as server:
        started = time.monotonic()
        url = f"{server.url}/v1/changes?feed=continuous&since=now&heartbeat=60000"
        with urllib.request.urlopen(url, timeout=5) as response:  # returns once headers are in
            assert response.status == 200
        assert time.monotonic() - started < 2


@pytest.mark.slow
def test_an_idle_server_does_not_poll_in_a_loop(data: Path) -> None:
    """The shared reader's own reads (heartbeat.json, the directory listing) must not wake it
    (watchdog reports opens): idle, it waits for a write or its resolved interval."""
    with Running(data) as server:
        time.sleep(0.5)
        started = time.process_time()
        time.sleep(2)
        assert time.process_time() - started < 0.5  # was a whole core
        assert request(f"{server.url}/v1/info")[0] == 200


def test_chunk_tokens_are_the_merged_readers_and_framing_slices_match(data: Path) -> None:
    """A chunk makes each event's token while framing (moonish.serve.chunks): they equal the
    token a merged reader reports after each event, in the rows, the SSE ids and ``seqs``."""
    from moonish.cdc.merged_read import MergedTail
    from moonish.serve.chunks import ROWS, SSE, chunk_of

    with MergedTail(data, "earliest") as stream:
        expected = []
        for _ in stream:
            expected.append(str(stream.token).encode())
    with MergedTail(data, "earliest") as stream:
        before, seqs, rows = stream.token, [], []
        for batch in stream.batches():
            chunk = chunk_of(batch, before)
            before = batch.token
            rows += [orjson.loads(line)["seq"].encode() for line in chunk.blob(ROWS).splitlines()]
            ids = [part.split(b"\n", 1)[0][4:] for part in chunk.blob(SSE).split(b"\n\n")[:-1]]
            assert ids == chunk.seqs
            seqs += chunk.seqs
            n = len(chunk)
            assert chunk.framed(ROWS, 1, n - 1) == b"".join(
                line + b"\n" for line in chunk.blob(ROWS).splitlines()[1 : n - 1]
            )
    assert rows == seqs == expected and len(expected) > 30
