"""A headless Chromium started by a test, driven over the Chrome DevTools Protocol.

Chromium listens on a port of its choosing on 127.0.0.1 (``--remote-debugging-port=0``) and
writes it, with the browser's WebSocket path, to ``DevToolsActivePort`` in its profile
directory; the test talks CDP (https://chromedevtools.github.io/devtools-protocol/) over
aiohttp's WebSocket client: one page target, attached with a flat session.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import orjson
import pytest


def executable() -> str:
    """Debian's ``chromium`` (``make install`` installs it); a test fails without it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is not installed: `make install` (apt-get install chromium)")
    return found


class Browser:
    """``async with Browser(tmp) as page``: a headless Chromium with one page."""

    def __init__(self, tmp: Path, width: int = 1280, height: int = 900) -> None:
        self.profile = tmp / "chromium-profile"
        self.size = (width, height)
        self.process: subprocess.Popen[bytes] | None = None
        self.session: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.page_session = ""
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next = 0
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Browser:
        self.profile.mkdir(parents=True)
        self.process = subprocess.Popen(
            [
                executable(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                f"--window-size={self.size[0]},{self.size[1]}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stopped with all its children
        )
        try:
            return await self._connect()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise

    async def _connect(self) -> Browser:
        port, path = await self._active_port()
        self.session = aiohttp.ClientSession()
        self.ws = await self.session.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        self.page_session = attached["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            await self.page(domain)
        await self.page(
            "Emulation.setDeviceMetricsOverride",
            {
                "width": self.size[0],
                "height": self.size[1],
                "deviceScaleFactor": 1,
                "mobile": False,
            },
        )
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
            with contextlib.suppress(ProcessLookupError):  # renderers and zygotes too
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    async def _active_port(self) -> tuple[int, str]:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.poll() is None, "chromium exited"
            if marker.exists():
                lines = marker.read_text().split("\n")
                if len(lines) >= 2 and lines[1]:
                    return int(lines[0]), lines[1]
            await asyncio.sleep(0.05)
        raise AssertionError("chromium wrote no DevToolsActivePort in 30 s")

    async def _read(self) -> None:
        assert self.ws is not None
        async for message in self.ws:
            document = orjson.loads(message.data)
            if "id" in document:
                future = self._waiting.pop(document["id"], None)
                if future is not None and not future.done():
                    future.set_result(document)
            else:
                self.events.append((document["method"], document.get("params", {})))

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        """One CDP command; its result.

        Raises:
            AssertionError: the browser answered with an error.
        """
        assert self.ws is not None
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = future
        await self.ws.send_str(orjson.dumps(message).decode())  # CDP takes text frames only
        answer = await asyncio.wait_for(future, 30)
        assert "error" not in answer, f"{method}: {answer['error']}"
        result: dict[str, Any] = answer["result"]
        return result

    async def page(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A CDP command to the page."""
        return await self.send(method, params, self.page_session)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited).

        Raises:
            AssertionError: the expression threw.
        """
        answer = await self.page(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        assert "exceptionDetails" not in answer, answer["exceptionDetails"]
        return answer["result"].get("value")

    async def until(self, expression: str, timeout_s: float = 20) -> Any:
        """Evaluate ``expression`` until it is truthy; its value.

        Raises:
            AssertionError: it was not within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not true within {timeout_s} s: {expression}")
            await asyncio.sleep(0.05)

    async def navigate(self, url: str) -> None:
        await self.page("Page.navigate", {"url": url})
        await self.until("document.readyState === 'complete'")

    async def screenshot(self, path: Path) -> bytes:
        """A PNG of the page, also written to ``path``."""
        answer = await self.page("Page.captureScreenshot", {"format": "png"})
        png = base64.b64decode(answer["data"])
        path.write_bytes(png)
        return png

    def errors(self) -> list[str]:
        """Console errors and browser log errors so far (a CSP violation is one)."""
        found = []
        for method, params in self.events:
            if method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(params["entry"]["text"])
            elif method == "Runtime.exceptionThrown":
                found.append(str(params["exceptionDetails"]))
            elif method == "Runtime.consoleAPICalled" and params["type"] == "error":
                found.append(str(params["args"]))
        return found
