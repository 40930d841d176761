"""The status page at ``/`` in a real browser (Debian's chromium, headless, over CDP): it shows
shards, consumers and the capture (or says a table is empty), its charts of the last hour
draw the server's samples, changes written after it loaded appear in its live view, a
screenshot is a real PNG, it passes its own Content-Security-Policy, and a token-protected
server shows nothing without the token. A browser ``EventSource`` that reconnects resumes with
Last-Event-ID: no gap, no duplicate."""

from __future__ import annotations

import asyncio
import struct
import time
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest

from moonish.cdc.merged_read import read_merged
from moonish.datadir import consumers
from moonish.serve import ServeOptions
from tests.support.servers.chromium import Browser
from tests.support.servers.serve_util import TOKEN, Running
from tests.support.steps import write_steps

pytestmark = pytest.mark.browser


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_steps(tmp_path / "data", 2, [(n % 2, 1, 1) for n in range(12)])
    consumers.create(tmp_path / "data", "billing", (3, 2))
    return tmp_path / "data"


def written_after(data: Path, token: str) -> list[tuple[int, int]]:
    return [(e.shard, e.lsn) for e in read_merged(data, token, 10_000).events]


def test_the_page_is_behind_the_token_and_sends_strict_headers(data: Path) -> None:
    with Running(data, ServeOptions(port=0, token=TOKEN)) as server:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(server.url + "/", timeout=10)
        assert refused.value.code == 401
        assert refused.value.read() == (
            b'{"error":"unauthorized","reason":"a valid bearer token is required"}'
        )
        with urllib.request.urlopen(f"{server.url}/?access_token={TOKEN}", timeout=10) as page:
            body = page.read()
            assert page.headers["Content-Type"].startswith("text/html")
            policy = page.headers["Content-Security-Policy"]
            assert "default-src 'none'" in policy and "script-src 'sha256-" in policy
            assert page.headers["Referrer-Policy"] == "no-referrer"
        assert b"EventSource" in body and TOKEN.encode() not in body


def test_live_changes_appear_in_the_page_and_a_screenshot_is_taken(
    data: Path, tmp_path: Path
) -> None:
    with Running(data, ServeOptions(port=0, token=TOKEN)) as server:
        asyncio.run(_live_view(server.url, data, tmp_path))


async def _live_view(url: str, data: Path, tmp_path: Path) -> None:
    async with Browser(tmp_path) as browser:
        await browser.navigate(f"{url}/?access_token={TOKEN}")
        await browser.until("document.getElementById('state').textContent === 'live'")
        await browser.until("document.querySelectorAll('#shards tr').length === 2")
        consumer = await browser.until(
            "[...document.querySelectorAll('#consumers td')].map((td) => td.textContent)"
        )
        assert consumer[:3] == ["billing", "active", str(12 - 5)]
        assert await browser.evaluate("document.querySelectorAll('#live tr').length") == 0
        before = str(read_merged(data, "now", 1).token)
        await asyncio.to_thread(write_steps, data, 2, [(0, 1, 1), (1, 3, 1), (0, 1, 1)])
        expected = written_after(data, before)
        rows = await browser.until(
            "(() => { const rows = [...document.querySelectorAll('#live tr')];"
            f" return rows.length === {len(expected)} &&"
            " rows.map((r) => [Number(r.dataset.shard), Number(r.dataset.lsn), r.dataset.token]);"
            " })()"
        )
        rows.reverse()  # newest first on the page
        assert sorted((shard, lsn) for shard, lsn, _ in rows) == sorted(expected)
        assert [token for _, _, token in rows] == sorted(token for _, _, token in rows)
        assert rows[-1][2] == str(read_merged(data, before, 10_000).token)
        assert await browser.evaluate("document.getElementById('live-count').textContent") == "5"
        await browser.until("/^[0-9.,]+$/.test(document.getElementById('rate').textContent)", 10)
        png = await browser.screenshot(tmp_path / "status.png")
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
        width, height = struct.unpack(">II", png[16:24])
        assert (width, height) == (1280, 900) and len(png) > 20_000  # text, tables: not blank
        assert browser.errors() == []  # the page passes its own CSP, no script error


RESUME = """
window.got = []; window.opens = 0;
const feed = new EventSource("/v1/changes?feed=eventsource&since=earliest&timeout=300"
                             + "&access_token=%s");
feed.onopen = () => { window.opens += 1; };
feed.onmessage = (e) => {
  const source = JSON.parse(e.data).source;
  window.got.push([source.shard, source.lsn, e.lastEventId]);
};
true
"""


def test_a_browser_eventsource_resumes_with_last_event_id(data: Path, tmp_path: Path) -> None:
    """The feed ends after 300 ms without a change; the browser reconnects by itself with
    Last-Event-ID, which overrides ``since=earliest``: a duplicate would show otherwise."""
    with Running(data, ServeOptions(port=0, token=TOKEN)) as server:
        asyncio.run(_resume(server.url, data, tmp_path))


async def _resume(url: str, data: Path, tmp_path: Path) -> None:
    async with Browser(tmp_path) as browser:
        await browser.navigate(f"{url}/?access_token={TOKEN}")
        assert await browser.evaluate(RESUME % TOKEN)
        await browser.until("window.got.length === 12")
        for round_ in range(2):
            opens = await browser.evaluate("window.opens")
            await browser.until(f"window.opens > {opens}", 20)  # it ended and came back
            await asyncio.to_thread(write_steps, data, 2, [(round_, 2, 1), (1 - round_, 1, 1)])
        await browser.until("window.got.length >= 18", 20)
        await asyncio.sleep(0.5)  # (nothing more may come)
        got = await browser.evaluate("window.got")
        for shard in (0, 1):  # every change once, each shard in LSN order
            lsns = [lsn for k, lsn, _ in got if k == shard]
            assert lsns == [lsn for k, lsn in written_after(data, "earliest") if k == shard]
        assert len(got) == 18
        assert [token for _, _, token in got] == sorted(token for _, _, token in got)


def test_the_page_shows_the_capture_and_says_when_a_table_is_empty(tmp_path: Path) -> None:
    """No consumers: the table says so; a capture's row (master, link, bytes and seconds
    behind, offsets, last full resync, full resyncs, reconnects), and once its file is gone,
    a row saying no capture writes the data directory."""
    from moonish.redis.capture.status import CaptureReport, write_status

    data = tmp_path / "data"
    write_steps(data, 2, [(n % 2, 1, 1) for n in range(4)])
    report = CaptureReport(
        master="redis://127.0.0.1:6379",
        replid="a" * 40,
        link="connected",
        received_offset=2_000,
        durable_offset=1_500,
        master_offset=21_500,
        bytes_behind=20_000,
        seconds_behind=3.0,
        reconnects=4,
    )
    write_status(str(data), report, time.time_ns() // 1000, running=True)
    with Running(data, ServeOptions(port=0)) as server:
        asyncio.run(_capture_view(server.url, data, tmp_path))


async def _capture_view(url: str, data: Path, tmp_path: Path) -> None:
    from moonish.redis.capture.status import STATUS_NAME

    cells = "[...document.querySelectorAll('#%s td')].map((td) => td.textContent)"
    async with Browser(tmp_path) as browser:
        await browser.navigate(f"{url}/")
        await browser.until("document.querySelectorAll('#shards tr').length === 2")
        assert await browser.until(cells % "consumers") == ["no consumers"]
        capture = await browser.until(cells % "capture")
        assert capture == [
            "redis://127.0.0.1:6379",
            "connected",
            "20,000",
            "3.0 s",
            "1,500 / 2,000",
            "none",
            "0",
            "4",
        ]
        (data / STATUS_NAME).unlink()
        await browser.until(
            f"JSON.stringify({cells % 'capture'})"
            " === JSON.stringify(['no live capture writes this data directory'])"
        )
        assert browser.errors() == []


def test_the_page_charts_events_per_second_and_seconds_behind_the_source(tmp_path: Path) -> None:
    """The server samples its figures (here every 250 ms): the seconds-behind chart draws the
    capture's lag from its status file, the events/s chart rises after writes, and the rates
    it draws add up to the changes written (what /v1/info's history carries)."""
    data = tmp_path / "data"
    write_steps(data, 2, [(n % 2, 1, 1) for n in range(4)])
    with Running(data, ServeOptions(port=0, history_interval_ms=250)) as server:
        asyncio.run(_charts(server.url, data, tmp_path))


def _capture_status(data: Path, seconds_behind: float) -> None:
    from moonish.redis.capture.status import CaptureReport, write_status

    report = CaptureReport(
        master="redis://127.0.0.1:6379",
        replid="a" * 40,
        link="connected",
        received_offset=2_000,
        durable_offset=1_500,
        master_offset=21_500,
        bytes_behind=20_000,
        seconds_behind=seconds_behind,
    )
    write_status(str(data), report, time.time_ns() // 1000, running=True)


async def _charts(url: str, data: Path, tmp_path: Path) -> None:
    chart = "document.getElementById('chart-%s').dataset.%s"
    async with Browser(tmp_path) as browser:
        await asyncio.to_thread(_capture_status, data, 3.0)
        await browser.navigate(f"{url}/")
        await browser.until(f"Number({chart % ('behind', 'points')}) >= 2")
        assert await browser.evaluate(chart % ("behind", "last")) == "3"
        assert await browser.evaluate("document.getElementById('behind').textContent") == "3.0 s"
        assert await browser.evaluate(chart % ("events", "max")) == "0"  # nothing written yet
        await asyncio.to_thread(write_steps, data, 2, [(n % 2, 1, 1) for n in range(40)])
        await asyncio.to_thread(_capture_status, data, 7.5)
        await browser.until(f"Number({chart % ('events', 'max')}) > 0")
        await browser.until(f"{chart % ('behind', 'last')} === '7.5'")
        drawn = "document.querySelector('#chart-%s polyline').points.numberOfItems"
        assert await browser.evaluate(drawn % "events") >= 2
        assert await browser.evaluate(drawn % "behind") >= 2
        assert await browser.evaluate("document.getElementById('events').textContent") == "40"
        assert browser.errors() == []
    with urllib.request.urlopen(f"{url}/v1/info", timeout=10) as response:
        server = orjson.loads(response.read())["server"]
    history = server["history"]
    times, rates = history["time_s"], history["events_per_s"]
    seen = sum(
        rate * (t - before)
        for rate, t, before in zip(rates[1:], times[1:], times[:-1], strict=True)
    )
    assert server["events"] == 40 and abs(seen - 40) < 0.5
    assert history["interval_ms"] == 250 and history["span_s"] == 3600
