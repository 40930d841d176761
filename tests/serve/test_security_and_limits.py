"""``moonish serve`` security and limits: loopback by default, a bearer token required anywhere
else and checked on every path (401 that reveals nothing), TLS, 429 past ``max_subscribers``,
413 and close 1009 past ``max_request_bytes``."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from cli.main import main
from moonish.errors import InvalidArgumentError
from moonish.serve import Limits, ServeOptions, load_token
from tests.support.servers.serve_util import TOKEN, Running, certificate, request
from tests.support.steps import write_steps

UNAUTHORIZED = {"error": "unauthorized", "reason": "a valid bearer token is required"}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_steps(tmp_path / "data", 2, [(n % 2, 1, 1) for n in range(10)])
    return tmp_path / "data"


def test_any_address_but_loopback_needs_a_token(data: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="token-file"):
        ServeOptions(host="0.0.0.0")
    ServeOptions(host="::1")
    ServeOptions(host="127.0.0.5")
    assert main(["serve", str(data), "--host", "0.0.0.0"]) == 2  # refused before binding
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(InvalidArgumentError, match="at least 16"):
        load_token(short)
    good = tmp_path / "token"
    good.write_text(TOKEN + "\n")
    assert load_token(good) == TOKEN


def test_every_request_without_a_valid_token_gets_401_and_nothing_else(data: Path) -> None:
    options = ServeOptions(port=0, token=TOKEN)
    with Running(data, options) as server:
        for path in [
            "/v1/info",
            "/v1/changes?since=bogus",
            "/v1/consumers/x",
            "/nothing",
            "/v1/ws",
            "/v1/changes?feed=continuous&access_token=wrong",
        ]:
            for headers in [
                {},
                {"Authorization": "Bearer wrong-token-0123456789"},
                {"Authorization": "Basic " + TOKEN},
            ]:
                req = urllib.request.Request(server.url + path, headers=headers)
                with pytest.raises(urllib.error.HTTPError) as info:
                    urllib.request.urlopen(req, timeout=10)
                assert info.value.code == 401, path
                assert info.value.headers["Server"] == "moonish"
                assert info.value.headers["WWW-Authenticate"].startswith("Bearer")
                assert info.value.read() == (
                    b'{"error":"unauthorized","reason":"a valid bearer token is required"}'
                )
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert request(f"{server.url}/v1/info", headers=auth)[0] == 200
        text = subprocess.run(
            [
                "curl",
                "-sN",
                f"{server.url}/v1/changes?feed=eventsource&since=earliest"
                f"&timeout=200&access_token={TOKEN}",
            ],
            capture_output=True,
            check=True,
        ).stdout
        assert text.count(b"id: m2.") == 11  # 10 changes and the last position


@pytest.mark.slow
def test_tls_with_a_token(data: Path, tmp_path: Path) -> None:
    cert, key = certificate(tmp_path)
    options = ServeOptions(port=0, token=TOKEN, tls_cert=str(cert), tls_key=str(key))
    with Running(data, options) as server:
        assert server.url.startswith("https://127.0.0.1:")
        done = subprocess.run(
            [
                "curl",
                "-s",
                "--cacert",
                str(cert),
                "-H",
                f"Authorization: Bearer {TOKEN}",
                f"{server.url}/v1/changes?limit=2",
            ],
            capture_output=True,
            check=True,
        )
        assert done.stdout.startswith(b'{"results":[{"seq":"m2.')
        plain = subprocess.run(
            ["curl", "-s", server.url.replace("https", "http") + "/v1/info"], capture_output=True
        )
        assert plain.returncode != 0 or b"results" not in plain.stdout
        untrusted = subprocess.run(["curl", "-s", f"{server.url}/v1/info"], capture_output=True)
        assert untrusted.returncode == 60  # a certificate curl does not trust

        async def websocket() -> None:
            context = ssl.create_default_context(cafile=str(cert))
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(
                    f"{server.url.replace('https', 'wss')}/v1/ws?since=earliest",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    ssl=context,
                ) as ws,
            ):
                assert (await ws.receive_json())["token"] == "m2.a0.a0"
                await ws.send_json({"request": 3})
                assert (await ws.receive(timeout=10)).data.count(b'{"seq"') == 3
            await asyncio.sleep(0.25)  # TLS transports close after the session (aiohttp's docs)

        asyncio.run(websocket())
    with pytest.raises(InvalidArgumentError, match="both"):
        ServeOptions(tls_cert=str(cert))


def test_limits_answer_429_413_and_close_1009(data: Path) -> None:
    limits = Limits(max_subscribers=2, max_request_bytes=200)
    with Running(data, ServeOptions(port=0, limits=limits)) as server:
        feed = f"{server.url}/v1/changes?feed=continuous&since=now&heartbeat=60000"
        opened = [urllib.request.urlopen(feed, timeout=10) for _ in range(2)]
        try:
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(feed, timeout=10)
            assert info.value.code == 429 and info.value.headers["Retry-After"] == "1"
            assert b'"limit":"max_subscribers","value":2' in info.value.read()
            assert request(f"{server.url}/v1/changes?limit=1")[0] == 200  # one read: no feed
        finally:
            for response in opened:
                response.close()
        status, body = request(f"{server.url}/v1/consumers", "POST", {"name": "x" * 300})
        assert status == 413 and body["error"] == "request_too_large"

        async def too_big() -> None:
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(f"{server.url}/v1/ws") as ws,
            ):
                await ws.receive_json()
                await ws.send_str('{"request": 1, "pad": "' + "x" * 500 + '"}')
                assert (await ws.receive(timeout=10)).type == aiohttp.WSMsgType.CLOSE
                assert ws.close_code == 1009

        asyncio.run(too_big())
        status, info = request(f"{server.url}/v1/info")
        assert info["server"]["subscribers"] == 0  # every feed was counted out again
