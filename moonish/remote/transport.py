"""HTTP for the remote client: one aiohttp session on a private event loop in a daemon thread,
behind blocking calls.

**Decision: aiohttp, driven from blocking code.** The client's API is the in-process one,
which is blocking (``read`` returns, ``tail`` is an iterator), and moonish already depends on
aiohttp (the server's library): one well-kept library for server and client, with streaming
bodies, TLS, keep-alive and timeouts, and no second HTTP stack to install. Its ``asyncio``
code runs on a loop of its own in a daemon thread started on first use; each blocking call
hands a coroutine to it and waits. A call in progress can be cancelled from any thread
(:meth:`Call.cancel`), which is how ``RemoteTail.close()`` wakes a blocked iteration.
aiohttp is imported by this module only, and this module only when a client connects, so
``import moonish`` does not load it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

import aiohttp
import orjson

from moonish.errors import InvalidArgumentError, MoonishError
from moonish.remote.errors import RemoteProtocolError, RemoteUnavailableError, error_from_body
from moonish.remote.options import ClientOptions

T = TypeVar("T")
READ_BYTES = 1 << 20
"""Most bytes a stream read hands over at once (a wake-up's worth of rows)."""
SSL_CLOSE_S = 0.1
"""How long closing a client lets its TLS connections finish closing (aiohttp's advice)."""


class Call(Generic[T]):
    """A coroutine running on the transport's loop, waited for by a blocking caller."""

    def __init__(self, future: concurrent.futures.Future[T]) -> None:
        self._future = future

    def result(self) -> T:
        """Wait for the answer.

        Raises:
            concurrent.futures.CancelledError: :meth:`cancel` was called.
            MoonishError: as the coroutine raised it.
        """
        return self._future.result()

    def cancel(self) -> None:
        """Cancel the coroutine (from any thread); a waiting :meth:`result` raises."""
        self._future.cancel()


class Stream:
    """An open feed (``feed=continuous``): its response and the part of a line not yet
    complete. Read by :meth:`Transport.read_lines`; closed by :meth:`Transport.close_stream`."""

    def __init__(self, response: aiohttp.ClientResponse, url: str) -> None:
        self.response, self.url, self.partial = response, url, b""


class Transport:
    """The connection to one server: base URL, bearer token, TLS, timeouts.

    Raises:
        InvalidArgumentError: at creation, a ``cafile`` that does not load.
    """

    def __init__(self, url: str, token: str | None, options: ClientOptions) -> None:
        self.url = url
        self.options = options
        self._headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        self._ssl: Any = options.ssl_context() if url.startswith("https:") else None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Call[T]:
        """Run ``coroutine`` on the transport's loop (started on first use).

        Raises:
            InvalidArgumentError: the transport is closed.
        """
        with self._lock:
            if self._closed:
                coroutine.close()
                raise InvalidArgumentError(f"the client of {self.url} is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="moonish-remote", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            loop = self._loop
        return Call(asyncio.run_coroutine_threadsafe(coroutine, loop))

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """:meth:`submit` and wait."""
        return self.submit(coroutine).result()

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None:  # created on the loop, as aiohttp wants
            connector = aiohttp.TCPConnector(limit=0, ssl=self._ssl)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._headers, raise_for_status=False
            )
        return self._session

    def _timeout(self, total_ms: int | None, read_ms: int | None = None) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=None if total_ms is None else total_ms / 1000,
            sock_connect=self.options.connect_timeout_ms / 1000,
            sock_read=None if read_ms is None else read_ms / 1000,
        )

    async def request(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> bytes:
        """The body of a successful (2xx) answer.

        Raises:
            MoonishError: the server's error (moonish.remote.errors), or
                RemoteUnavailableError when it did not answer in time.
        """
        url = self.url + path
        session = self._session_now()
        data = None if body is None else orjson.dumps(body)
        headers = {} if body is None else {"Content-Type": "application/json"}
        timeout = self._timeout(self.options.request_timeout_ms)
        with _failures(url):
            async with session.request(
                method, url, params=params, data=data, headers=headers, timeout=timeout
            ) as response:
                raw = await response.read()
                if response.status >= 300:
                    raise _error(url, response.status, raw)
                return raw

    async def open_stream(self, path: str, params: dict[str, str]) -> Stream:
        """Open a feed; its headers have come, its body has not been read.

        Raises:
            MoonishError: as :meth:`request`.
        """
        url = self.url + path
        session = self._session_now()
        timeout = self._timeout(None, 3 * self.options.heartbeat_ms)
        with _failures(url):
            response = await session.get(url, params=params, timeout=timeout)
            if response.status != 200:
                raw = await response.read()
                response.release()
                raise _error(url, response.status, raw)
        return Stream(response, url)

    async def read_lines(self, stream: Stream) -> list[bytes] | None:
        """The complete lines that have come (at least one, without newlines; a heartbeat is
        an empty line), or ``None`` at the end of the feed.

        Raises:
            RemoteUnavailableError: the connection dropped, or nothing came for three
                heartbeats.
        """
        content = stream.response.content
        with _failures(stream.url):
            while True:
                data = await content.readany()
                if not data:
                    if stream.partial:
                        raise RemoteUnavailableError(stream.url, "the feed ended inside a line")
                    return None
                if len(data) < READ_BYTES:
                    while not content.is_eof() and (more := content.read_nowait(READ_BYTES)):
                        data += more
                        if len(data) >= READ_BYTES:
                            break
                if b"\n" not in data:
                    stream.partial += data
                    continue
                head, _, rest = data.rpartition(b"\n")
                lines = (stream.partial + head).split(b"\n")
                stream.partial = rest
                return lines

    async def close_stream(self, stream: Stream) -> None:
        stream.response.close()

    def close(self) -> None:
        """Close the session and stop the loop's thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def shut() -> None:
            if self._session is not None:
                await self._session.close()
            if self._ssl is not None:  # a TLS transport's close sends close_notify first
                await asyncio.sleep(SSL_CLOSE_S)

        try:
            asyncio.run_coroutine_threadsafe(shut(), loop).result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()


def _error(url: str, status: int, raw: bytes) -> MoonishError:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    return error_from_body(url, status, body)


class _failures:
    """Network failures as moonish errors: a certificate or TLS failure is the caller's to
    fix (``InvalidArgumentError``); anything else that kept an answer from coming is
    ``RemoteUnavailableError``; an answer that does not parse is ``RemoteProtocolError``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: object
    ) -> None:
        if error is None or isinstance(error, MoonishError | asyncio.CancelledError):
            return
        if isinstance(error, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
            raise InvalidArgumentError(f"TLS with {self.url} failed: {error}") from error
        if isinstance(error, aiohttp.ClientResponseError | aiohttp.ContentTypeError):
            raise RemoteProtocolError(self.url, str(error), status=error.status) from error
        if isinstance(error, aiohttp.ClientError | OSError | asyncio.TimeoutError):
            what = "no answer in time" if isinstance(error, asyncio.TimeoutError) else error
            raise RemoteUnavailableError(self.url, f"{what or type(error).__name__}") from error
