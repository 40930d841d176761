"""``moonish serve``: resuming from any emitted token gives exactly the rest (hypothesis, random
writes, disconnects and ring sizes), and a server SIGKILLed and restarted under load loses
nothing for a consumer that acknowledges."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moonish.cdc.token import Token
from moonish.datadir import consumers
from tests.support.paths import ROOT
from tests.support.scale import scaled
from tests.support.servers.serve_util import Running, request
from tests.support.steps import WRITER, write_steps

SHARDS = 3


Action = tuple[str, Any]


step = st.tuples(
    st.integers(0, SHARDS - 1), st.sampled_from([1, 1, 2, 3]), st.sampled_from([0, 1, 5])
)


writes = st.lists(step, min_size=1, max_size=12)


actions = st.lists(
    st.one_of(
        st.tuples(st.just("write"), writes),
        st.tuples(st.just("read"), st.tuples(st.integers(1, 8), st.integers(0, 6))),
    ),
    min_size=2,
    max_size=10,
)


async def read_some(url: str, since: str, limit: int, cut: int) -> list[dict[str, Any]]:
    """A continuous feed from ``since``: up to ``limit`` changes, or the client hangs up
    after ``cut`` lines (0: never), or 50 ms without a change end it."""
    query = f"feed=continuous&since={since}&limit={limit}&timeout=50"
    got = []
    async with aiohttp.ClientSession() as session, session.get(f"{url}/v1/changes?{query}") as r:
        async for line in r.content:
            row = orjson.loads(line)
            if "change" in row:
                got.append(row)
                if cut and len(got) >= cut:
                    break  # a disconnect in the middle of the stream
    return got


@settings(max_examples=scaled(20), deadline=None, suppress_health_check=list(HealthCheck))
@given(first=writes, plan=actions, ring_bytes=st.sampled_from([2048, 16384, 1 << 26]))
@pytest.mark.slow
def test_resuming_from_every_emitted_token_gives_exactly_the_rest(
    tmp_path_factory: pytest.TempPathFactory,
    first: list[tuple[int, int, int]],
    plan: list[Action],
    ring_bytes: int,
) -> None:
    data = tmp_path_factory.mktemp("resume") / "data"
    write_steps(data, SHARDS, first, segment_bytes=300)
    seen: list[dict[str, Any]] = []
    since = "earliest"
    with Running(data, ring_bytes=ring_bytes) as server:
        for kind, argument in [*plan, ("read", (10_000, 0))]:
            if kind == "write":
                write_steps(data, SHARDS, argument, segment_bytes=300)
                continue
            limit, cut = argument
            got = asyncio.run(read_some(server.url, since, limit, cut))
            seen += got
            since = got[-1]["seq"] if got else since
        delivered: dict[int, list[int]] = {k: [] for k in range(SHARDS)}
        for row in seen:  # each token says exactly what was delivered up to its row
            source = row["change"]["source"]
            delivered[source["shard"]].append(source["lsn"])
            token = Token.parse(row["seq"], SHARDS)
            for k in range(SHARDS):
                assert delivered[k] == list(range(1, token.positions[k] + 1))
        _, end = request(f"{server.url}/v1/changes?since=now&limit=1")
        assert Token.parse(since, SHARDS) == Token.parse(end["last_seq"], SHARDS)  # all of it
        for row in seen[:: max(1, len(seen) // 8)]:  # a normal read from an emitted token
            token = Token.parse(row["seq"], SHARDS)
            _, page = request(f"{server.url}/v1/changes?since={row['seq']}&limit=10000")
            rest = [
                (r["change"]["source"]["shard"], r["change"]["source"]["lsn"])
                for r in page["results"]
            ]
            wanted = {
                (k, lsn) for k in range(SHARDS) for lsn in delivered[k] if lsn > token.positions[k]
            }
            assert sorted(rest) == sorted(wanted) and len(rest) == len(wanted)


def start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from cli.main import entry; entry()",
            "serve",
            str(data),
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    process.stdout.close()  # it prints nothing more
    return process, orjson.loads(line)["url"]


@pytest.mark.slow
def test_a_server_killed_and_restarted_under_load_loses_nothing_for_an_acking_consumer(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    write_steps(data, 2, [(0, 1, 1), (1, 1, 1)])
    consumers.create(data, "billing", (0, 0))
    rounds = 600
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(data), str(rounds)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    received: list[tuple[int, int]] = []
    server, url = start_server(data)
    kills = 0

    def kill_later() -> None:
        time.sleep(0.8)
        server.send_signal(signal.SIGKILL)

    killer = threading.Thread(target=kill_later)
    killer.start()

    async def consume(url: str) -> bool:
        """Read as the consumer, ack every 20 changes; False when the server went away."""
        query = "feed=continuous&consumer=billing&heartbeat=200"
        pending: list[str] = []
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{url}/v1/changes?{query}") as response,
            ):
                async for line in response.content:
                    row = orjson.loads(line) if line.strip() else {}
                    if "change" in row:
                        source = row["change"]["source"]
                        received.append((source["shard"], source["lsn"]))
                        pending.append(row["seq"])
                    if len(pending) >= 20 or (pending and not row):
                        async with session.post(
                            f"{url}/v1/consumers/billing/ack", json={"token": pending[-1]}
                        ) as ack:
                            assert ack.status == 200
                        pending.clear()
                    if not row and writer.poll() is not None and _caught_up(data):
                        return True  # a heartbeat: idle, everything acknowledged
        except (aiohttp.ClientError, ConnectionError):
            return False
        return False

    try:
        while not asyncio.run(consume(url)):
            server.wait(10)
            kills += 1
            assert kills < 5
            server, url = start_server(data)  # restarted: resume from the consumer
    finally:
        killer.join()
        writer.wait(60)
        server.send_signal(signal.SIGTERM)
        assert server.wait(20) == 0
    assert kills == 1
    written = {(k, lsn) for k in (0, 1) for lsn in range(1, _latest(data, k) + 1)}
    assert set(received) == written  # nothing lost; what came twice came after the kill
    assert len(received) - len(written) < 200


def _latest(data: Path, shard: int) -> int:
    from moonish.cdc.positions import latest_lsn

    return latest_lsn(str(data / f"shard-{shard}"))


def _caught_up(data: Path) -> bool:
    position = consumers.load(data, "billing").positions
    return position == (_latest(data, 0), _latest(data, 1))
