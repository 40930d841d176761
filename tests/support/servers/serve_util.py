"""Running a ``moonish serve`` server inside a test, and small HTTP clients for it; a bearer
token and a self-signed certificate for 127.0.0.1; envelopes compared without their processing
time."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from moonish.serve import ServeOptions, Server
from moonish.serve.options import Limits
from moonish.serve.timer import Timer


class Running:
    """A server on 127.0.0.1 (a free port) in a thread with its own event loop."""

    def __init__(
        self,
        data: Path,
        options: ServeOptions | None = None,
        timer: Timer | None = None,
        **limits: Any,
    ) -> None:
        if options is None:
            options = ServeOptions(port=0, limits=Limits(**limits))
        self.server = Server(data, options, timer=timer)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Running:
        self._thread.start()
        self.call(self.server.start())
        return self

    def call(self, coroutine: Any, timeout: float = 30) -> Any:
        """Run ``coroutine`` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.call(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def state(self) -> Any:
        return self.server.state


def request(
    url: str,
    method: str = "GET",
    body: object = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> tuple[int, Any]:
    """``(status, parsed JSON body)`` of one request (urllib: a real HTTP client)."""
    data = None if body is None else orjson.dumps(body)
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


def ndjson(url: str, timeout: float = 30) -> list[dict[str, Any]]:
    """Every line of a feed that ends (``timeout`` or ``limit``), parsed."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return [orjson.loads(line) for line in response.read().splitlines() if line.strip()]


def rows_of(lines: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """``(shard, lsn)`` of each change row."""
    return [
        (r["change"]["source"]["shard"], r["change"]["source"]["lsn"])
        for r in lines
        if "change" in r
    ]


TOKEN = "s3cret-token-0123456789abcdef"


def certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def same(envelope: bytes) -> dict[str, Any]:
    """An envelope without its processing time (top-level ``ts_*``: when it was encoded)."""
    document: dict[str, Any] = orjson.loads(envelope)
    return {key: value for key, value in document.items() if not key.startswith("ts_")}
