"""The server: routes, the bearer-token guard, error bodies, start and stop.

Example::

    from moonish.serve import Server, ServeOptions

    async def main() -> None:
        server = Server("data", ServeOptions(port=0))
        await server.start()
        print(server.url)            # http://127.0.0.1:<port>
        ...
        await server.stop()

``moonish serve`` runs :func:`run`, which serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import MoonishError
from moonish.gcpolicy import settle_gc
from moonish.serve import admin, feeds, history, status, websocket
from moonish.serve.errors import (
    NotFoundError,
    RequestTooLargeError,
    UnauthorizedError,
    error_body,
)
from moonish.serve.hub import ServerState
from moonish.serve.options import ServeOptions
from moonish.serve.timer import LoopTimer, ManualTimer, Timer

log = logging.getLogger("moonish.serve")
Handler = Callable[[web.Request, ServerState], Awaitable[web.StreamResponse]]
SHUTDOWN_S = 2.0
"""How long stopping waits for open responses to finish before cancelling them."""


def _error_response(error: BaseException) -> web.Response:
    status, body = error_body(error)
    headers = {}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="moonish"'
    elif status == 429:
        headers["Retry-After"] = "1"
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


def _authorized(request: web.Request, token: bytes) -> bool:
    """A bearer token in the Authorization header (RFC 6750 §2.1), or the ``access_token``
    query parameter (§2.3, for a browser's EventSource, which cannot set headers)."""
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        given = request.query.get("access_token", "")
    return hmac.compare_digest(given.strip().encode(), token)


def _guard(token: str | None) -> Any:
    secret = None if token is None else token.encode()

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            if secret is not None and not _authorized(request, secret):
                raise UnauthorizedError("a valid bearer token is required")
            return await handler(request)
        except web.HTTPNotFound:
            return _error_response(NotFoundError(f"no such path: {request.path}"))
        except web.HTTPMethodNotAllowed as error:
            response = _error_response(NotFoundError("method not allowed"))
            response.set_status(405)
            body = {
                "error": "method_not_allowed",
                "reason": f"{request.method} is not allowed",
                "allowed": sorted(error.allowed_methods),
            }
            response.body = orjson.dumps(body)
            return response
        except web.HTTPRequestEntityTooLarge:
            return _error_response(RequestTooLargeError(request.app[MAX_BODY]))
        except MoonishError as error:
            return _error_response(error)

    return guard


MAX_BODY = web.AppKey("max_body", int)


async def _plain_server_header(request: web.Request, response: web.StreamResponse) -> None:
    """Name no library or version (an unauthorised caller learns nothing)."""
    response.headers["Server"] = "moonish"


def make_app(state: ServerState) -> web.Application:
    """The aiohttp application serving ``state``'s data directory (module docstrings of
    moonish.serve.feeds, moonish.serve.websocket and moonish.serve.admin list the routes)."""
    limits = state.options.limits
    app = web.Application(
        middlewares=[_guard(state.options.token)], client_max_size=limits.max_request_bytes
    )
    app[MAX_BODY] = limits.max_request_bytes
    app.on_response_prepare.append(_plain_server_header)

    def bound(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            return await handler(request, state)

        return run

    app.router.add_get("/", bound(status.page))
    app.router.add_get("/v1/info", bound(admin.info))
    app.router.add_get("/v1/changes", bound(feeds.changes))
    app.router.add_get("/v1/ws", bound(websocket.websocket))
    app.router.add_get("/v1/consumers", bound(admin.list_consumers))
    app.router.add_post("/v1/consumers", bound(admin.create_consumer))
    app.router.add_get("/v1/consumers/{name}", bound(admin.show_consumer))
    app.router.add_delete("/v1/consumers/{name}", bound(admin.drop_consumer))
    app.router.add_post("/v1/consumers/{name}/ack", bound(admin.ack_consumer))
    app.router.add_post("/v1/consumers/{name}/seek", bound(admin.seek_consumer))
    return app


class Server:
    """A change feed server for one data directory.

    Args:
        data_dir: the data directory (or one shard's directory).
        options: address, token, TLS and limits (moonish.serve.options).
        timer: the clock of heartbeats and timeouts (tests pass a
            :class:`~moonish.serve.timer.ManualTimer`); the event loop's by default.
        clock: the wall clock of the status page's history (moonish.serve.history).

    Raises:
        InvalidArgumentError: at :meth:`start`, not a data directory; TLS files that do
            not load; an address that cannot be bound (``OSError`` as such).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        options: ServeOptions | None = None,
        *,
        timer: Timer | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.data_dir = os.fspath(data_dir)
        self.options = options or ServeOptions()
        self._timer = timer
        self._clock = clock
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None
        self.state: ServerState | None = None
        self.port = self.options.port

    @property
    def url(self) -> str:
        """``http[s]://host:port`` of the running server."""
        host = self.options.host
        host = f"[{host}]" if ":" in host else host
        return f"{self.options.scheme}://{host}:{self.port}"

    async def start(self) -> None:
        """Start the shared reader at the log's current end and listen."""
        loop = asyncio.get_running_loop()
        timer = self._timer or LoopTimer(loop)
        if isinstance(timer, ManualTimer):
            timer.bind(loop)
        context = self.options.ssl_context()
        state = await asyncio.to_thread(
            ServerState, self.data_dir, self.options, timer, loop, self._clock
        )
        self.state = state
        state.publisher.start()
        ring = state.ring
        self._sampler = asyncio.create_task(
            history.sample_forever(
                state.history,
                self.data_dir,
                lambda: ring.end,
                self._clock,
                self.options.history_interval_ms,
            )
        )
        limits = self.options.limits
        runner = web.AppRunner(
            make_app(state),
            handle_signals=False,
            access_log=None,
            keepalive_timeout=limits.idle_timeout_ms / 1000,
            max_line_size=limits.max_line_bytes,
            max_field_size=limits.max_line_bytes,
            handler_cancellation=True,
            shutdown_timeout=SHUTDOWN_S,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.options.host, self.options.port, ssl_context=context)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            await history.stop(self._sampler)
            await asyncio.to_thread(state.publisher.stop)
            raise
        self._runner = runner
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """End open feeds (``unavailable``; WebSockets close with 1001), stop listening and
        the shared reader. Idempotent."""
        state, runner = self.state, self._runner
        self.state, self._runner = None, None
        if state is None:
            return
        state.stopping = True
        sampler, self._sampler = self._sampler, None
        await history.stop(sampler)
        state.ring.release_riders()
        state.ring.wake()
        for ws in list(state.websockets):
            await ws.close(code=1001, message=b"server stopping")
        if runner is not None:
            await runner.cleanup()
        await asyncio.to_thread(state.publisher.stop)


def run(
    data_dir: str | os.PathLike[str],
    options: ServeOptions,
    on_ready: Callable[[Server], None] | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM (on uvloop if it is installed).

    Raises:
        InvalidArgumentError: as :class:`Server`.
        OSError: the address cannot be bound.
    """

    async def main() -> None:
        server = Server(data_dir, options)
        await server.start()
        settle_gc()  # the application lives as long as the server (moonish.gcpolicy)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            if on_ready is not None:
                on_ready(server)
            await stop.wait()
        finally:
            await server.stop()

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(main())


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
