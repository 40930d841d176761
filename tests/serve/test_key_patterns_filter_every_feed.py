"""Key patterns on the server's feeds: ``moonish serve --include-keys/--exclude-keys`` apply to
every feed (/v1/changes of each kind, /v1/ws), a request's ``include_keys``/``exclude_keys``
(repeatable) are ANDed with them and with the other filters, changes left out still move the
token, and a bad pattern is a 400 (a request) or exit 2 (the command)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest

from moonish.cdc.merged_read import read_merged
from moonish.errors import InvalidArgumentError
from moonish.keypatterns import KeyPatterns
from moonish.serve import ServeOptions
from tests.support.cli import run
from tests.support.servers.serve_util import Running, ndjson, request
from tests.support.steps import write_steps


@pytest.fixture
def data(tmp_path: Path) -> Path:
    # keys k<n>.<i>: k0.0 k0.1 k0.2 k1.0 ... k29.0 (steps n % 5 == 0 write three)
    write_steps(tmp_path / "data", 2, [(n % 2, 1 + 2 * (n % 5 == 0), 1) for n in range(30)])
    return tmp_path / "data"


def keys_of(data: Path) -> list[str]:
    """Every change's key, in stream order."""
    envelopes = read_merged(data, "earliest", 10_000).events.envelopes
    return [orjson.loads(envelope)["after"]["key"] for envelope in envelopes]


def kept(keys: list[str], include: list[list[str]], exclude: list[str]) -> list[str]:
    """The keys that match one pattern of every ``include`` set and no ``exclude`` pattern."""
    out = []
    for key in keys:
        raw = key.encode()
        if all(KeyPatterns(s).any(raw) for s in include) and not KeyPatterns(exclude).any(raw):
            out.append(key)
    return out


def query(**params: list[str]) -> str:
    return "".join(f"&{name}={quote(v)}" for name, values in params.items() for v in values)


def test_request_patterns_and_with_the_other_filters_and_move_the_token(data: Path) -> None:
    every = keys_of(data)
    with Running(data) as server:
        base = f"{server.url}/v1/changes?since=earliest&limit=1000"
        last = request(base)[1]["last_seq"]
        asked = query(include_keys=["k1*", "k2?.*"], exclude_keys=["k2[0-4].*", "*.2"])
        status, page = request(base + asked)
        got = [r["change"]["after"]["key"] for r in page["results"]]
        expected = kept(every, [["k1*", "k2?.*"]], ["k2[0-4].*", "*.2"])
        assert status == 200 and got == expected and 0 < len(got) < len(every)
        assert page["last_seq"] == last  # past the changes left out too
        status, page = request(base + asked + "&key_prefix=k2")  # ANDed with key_prefix
        assert [r["change"]["after"]["key"] for r in page["results"]] == [
            key for key in expected if key.startswith("k2")
        ]
        lines = ndjson(
            f"{server.url}/v1/changes?feed=continuous&since=earliest&timeout=200"
            + query(exclude_keys=["*"])
        )
        assert lines == [{"last_seq": last, "pending": 0}]
        status, body = request(base + query(include_keys=["k[1"]))
        assert status == 400 and body["error"] == "bad_request" and "k[1" in body["reason"]


@pytest.mark.slow
def test_server_patterns_apply_to_every_feed_and_narrow_with_the_requests(data: Path) -> None:
    every = keys_of(data)
    options = ServeOptions(port=0, include_keys=("k1*", "k2*"), exclude_keys=("*.1",))
    server_only = kept(every, [["k1*", "k2*"]], ["*.1"])
    narrowed = kept(every, [["k1*", "k2*"], ["k2*", "k0*"]], ["*.1", "k25.*"])
    asked = query(include_keys=["k2*", "k0*"], exclude_keys=["k25.*"])
    with Running(data, options) as server:
        base = f"{server.url}/v1/changes?since=earliest"
        page = request(base + "&limit=1000")[1]
        assert [r["change"]["after"]["key"] for r in page["results"]] == server_only
        page = request(base + "&limit=1000" + asked)[1]
        assert [r["change"]["after"]["key"] for r in page["results"]] == narrowed
        lines = ndjson(f"{base}&feed=continuous&timeout=200")
        assert [r["change"]["after"]["key"] for r in lines if "change" in r] == server_only
        rows = request(f"{base}&feed=longpoll&timeout=200")[1]["results"]
        assert rows and [r["change"]["after"]["key"] for r in rows] == server_only[: len(rows)]
        events = _sse(f"{base}&feed=eventsource&timeout=200" + asked)
        assert [orjson.loads(e)["after"]["key"] for e in events] == narrowed
        assert asyncio.run(_ws_keys(server.url, asked, len(narrowed))) == narrowed


def _sse(url: str) -> list[bytes]:
    """The ``data:`` of each change event of an SSE feed that ends."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as response:
        blocks = response.read().split(b"\n\n")
    return [
        block.split(b"data: ", 1)[1]
        for block in blocks
        if block.startswith(b"id: ") and b"\ndata: " in block
    ]


async def _ws_keys(url: str, asked: str, expected: int) -> list[str]:
    got: list[dict[str, Any]] = []
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{url}/v1/ws?since=earliest{asked}") as ws,
    ):
        await ws.receive_json()  # the start token
        await ws.send_json({"request": 1000})
        while len(got) < expected:
            message = await ws.receive(timeout=10)
            assert message.type == aiohttp.WSMsgType.BINARY
            got += [orjson.loads(line) for line in message.data.splitlines()]
            got = [row for row in got if "change" in row]
        with pytest.raises(asyncio.TimeoutError):  # nothing more: the rest is left out
            while True:
                message = await ws.receive(timeout=0.3)
                rows = [orjson.loads(line) for line in message.data.splitlines()]
                assert not [row for row in rows if "change" in row]
    return [row["change"]["after"]["key"] for row in got]


@pytest.mark.slow
def test_a_bad_server_pattern_is_refused(data: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="unclosed"):
        ServeOptions(exclude_keys=("tmp:[",))
    done = run("serve", str(data), "--port", "0", "--exclude-keys", "tmp:[")
    assert done.returncode == 2 and b"unclosed" in done.stderr, done.stderr
