"""``moonish serve``: WebSocket push with credit, acks and cancel; fan-out in which a slow
subscriber holds nobody back and catches up from the log; a consumer trimmed mid-stream."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from moonish.cdc.merged_read import read_merged
from moonish.datadir import consumers
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import prune
from tests.support.servers.serve_util import Running
from tests.support.steps import write_steps


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_steps(tmp_path / "data", 2, [(n % 2, 1 + 2 * (n % 7 == 0), 1) for n in range(60)])
    return tmp_path / "data"


def rows(frame: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in frame.splitlines() if line.startswith(b'{"seq"')]


def keys(lines: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["change"]["source"]["shard"], r["change"]["source"]["lsn"]) for r in lines]


def test_credit_is_never_exceeded_and_every_change_comes_once(data: Path) -> None:
    expected = [(e.shard, e.lsn) for e in read_merged(data, "earliest", 10_000).events]

    async def run(url: str) -> None:
        rng = random.Random(5)
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"{url}/v1/ws?since=earliest") as ws,
        ):
            assert (await ws.receive_json())["token"] == "m2.a0.a0"
            granted, got = 0, []
            while len(got) < len(expected):
                n = rng.randint(1, 9)
                granted += n
                await ws.send_json({"request": n})
                while len(got) < min(granted, len(expected)):
                    message = await ws.receive(timeout=10)
                    assert message.type == aiohttp.WSMsgType.BINARY
                    got += rows(message.data)
                    assert len(got) <= granted  # never more outstanding than granted
            assert keys(got) == expected
            with pytest.raises(asyncio.TimeoutError):
                await ws.receive(timeout=0.3)  # nothing beyond the grant
            await ws.send_json({"cancel": True})
            last = await ws.receive_json()
            assert last == {"last_seq": got[-1]["seq"]}
            assert (await ws.receive()).type == aiohttp.WSMsgType.CLOSE
            assert ws.close_code == 1000

    with Running(data) as server:
        asyncio.run(run(server.url))


def test_ack_over_the_websocket_moves_the_consumer(data: Path) -> None:
    consumers.create(data, "sink", (0, 0))

    async def run(url: str) -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"{url}/v1/ws?consumer=sink") as ws,
        ):
            await ws.receive_json()
            await ws.send_json({"request": 10})
            got: list[dict[str, Any]] = []
            while len(got) < 10:
                got += rows((await ws.receive(timeout=10)).data)
            await ws.send_json({"ack": got[9]["seq"]})
            assert await ws.receive_json(timeout=10) == {
                "acked": {"name": "sink", "token": got[9]["seq"]}
            }
            await ws.send_json({"request": "x"})
            error = await ws.receive_json(timeout=10)
            assert error["error"] == "bad_request"
            assert (await ws.receive()).type == aiohttp.WSMsgType.CLOSE and ws.close_code == 4400

    with Running(data) as server:
        asyncio.run(run(server.url))
    assert str(consumers.load(data, "sink").positions) != "(0, 0)"


@pytest.mark.slow
def test_a_slow_subscriber_holds_nobody_back_and_catches_up_from_the_log(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    write_steps(data, 2, [(0, 1, 1), (1, 1, 1)])
    total = 3000

    async def run(server: Running) -> None:
        url = server.url
        async with aiohttp.ClientSession() as session:
            stalled = await session.ws_connect(f"{url}/v1/ws?since=now")  # grants 5, then waits
            await stalled.receive_json()
            await stalled.send_json({"request": 5})
            port = int(url.rsplit(":", 1)[1])
            silent = socket.socket()  # a continuous feed whose client reads nothing
            silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            silent.connect(("127.0.0.1", port))
            silent.sendall(
                b"GET /v1/changes?feed=continuous&since=now&heartbeat=60000 "
                b"HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            fast = await session.get(f"{url}/v1/changes?feed=continuous&since=now&limit={total}")
            steps = [(n % 2, 1, 1) for n in range(total)]
            writer = asyncio.create_task(asyncio.to_thread(write_steps, data, 2, steps))
            started = time.monotonic()
            body = await asyncio.wait_for(fast.read(), 60)  # everything, while the others stall
            elapsed = time.monotonic() - started
            await writer
            lines = [orjson.loads(line) for line in body.splitlines()]
            assert len([x for x in lines if "change" in x]) == total
            assert elapsed < 30
            assert server.state.ring.first > 0  # the ring moved past the stalled ones
            await stalled.send_json({"request": total})
            got: list[dict[str, Any]] = []
            while len(got) < total:
                got += rows((await stalled.receive(timeout=20)).data)
            assert sorted(keys(got)) == sorted(
                [(0, lsn) for lsn in range(2, total // 2 + 2)]
                + [(1, lsn) for lsn in range(2, total // 2 + 2)]
            )
            assert len(set(keys(got))) == total
            assert server.state.resyncs >= 1  # it read the log itself, then rejoined
            silent.setblocking(True)
            silent.settimeout(10)
            received = b""
            while received.count(b'{"seq"') < total:
                chunk = silent.recv(1 << 16)
                assert chunk
                received += chunk
            silent.close()
            await stalled.close()

    with Running(data, ring_bytes=256 * 1024) as server:
        asyncio.run(run(server))


def test_a_consumer_trimmed_mid_stream_gets_a_410_frame_then_a_close(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_steps(data, 2, [(0, 1, 1)] * 3000 + [(1, 1, 1)] * 5, segment_bytes=4096)
    consumers.create(data, "late", (0, 0))

    async def run(url: str) -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"{url}/v1/ws?consumer=late") as ws,
        ):
            await ws.receive_json()
            await ws.send_json({"request": 2})
            got = rows((await ws.receive(timeout=10)).data)
            policy = RetentionPolicy(max_records=0, max_pinned_bytes=0)
            report = await asyncio.to_thread(prune, str(data / "shard-0"), policy)
            assert report.lost  # retention marked it lost and removed its changes
            await ws.send_json({"request": 10_000})
            error = None
            while error is None:
                message = await ws.receive(timeout=10)
                if message.type == aiohttp.WSMsgType.BINARY:
                    got += rows(message.data)
                else:
                    error = orjson.loads(message.data)
            assert error["error"] == "consumer_lost" and error["consumer"] == "late"
            assert error["gone"] > 0 and error["oldest_token"].startswith("m2.")
            shard0 = [lsn for shard, lsn in keys(got) if shard == 0]
            assert shard0 == list(range(1, len(shard0) + 1))  # what it got has no gap
            assert (await ws.receive()).type == aiohttp.WSMsgType.CLOSE
            assert ws.close_code == 4410

    with Running(data, ring_bytes=64 * 1024) as server:
        asyncio.run(run(server.url))
