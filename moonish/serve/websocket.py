"""``GET /v1/ws``: WebSocket push with credit (evitaDB's ``request(n)``, Reactive Streams'
demand), acknowledgements and cancel.

Query parameters: ``since`` (token, ``earliest``, ``now``; default ``now``) or ``consumer``,
``resolved`` (ms), and the filters of ``/v1/changes`` (``include_keys``/``exclude_keys``
too, repeatable, ANDed with the server's own key patterns).

Protocol (docs/server.md, "GET /v1/ws: push with credit"):

- The server first sends a text frame ``{"token":"<start token>"}``.
- The client sends text frames, each a JSON object, at any time:
  ``{"request": n}`` grants ``n`` more rows (n >= 1); ``{"ack": "<token>"}`` confirms a named
  consumer's position (the feed's ``consumer``), answered by ``{"acked":{"name","token"}}``;
  ``{"cancel": true}`` ends the feed: the server answers ``{"last_seq":"<token>"}`` and closes
  with 1000.
- The server sends binary frames, each an NDJSON batch (rows, resolved markers,
  ``{"last_seq"}`` positions: moonish.serve.chunks). The number of rows sent never exceeds
  the rows granted: a batch may be cut inside an atomic batch to keep to it (every row
  carries the token after it).
- Errors: a text frame with the error object, then a close: 4400 (bad message), 4410 (the
  position is no longer retained), 4429 (more than ``max_credit`` rows outstanding), 1009
  (message over ``max_request_bytes``), 1011 (damage, a server failure), 1001 (the server
  stops), 1003 (a binary message from the client).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from moonish.cdc.api import ack
from moonish.cdc.token import Token
from moonish.datadir.consumers import Consumer
from moonish.errors import InvalidArgumentError, MoonishError
from moonish.metrics.families import SERVE_SENT_BYTES
from moonish.serve.chunks import ROWS
from moonish.serve.errors import LimitExceededError, error_body, ws_close_code
from moonish.serve.feeds import FILTER_PARAMS, FeedParams
from moonish.serve.hub import ServerState
from moonish.serve.subscription import Subscription

WS_PARAMS = frozenset({"since", "consumer", "resolved", "access_token"}) | FILTER_PARAMS


class _Feed:
    """One WebSocket's credit and sending task."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        state: ServerState,
        subscription: Subscription,
        consumer: Consumer | None,
    ) -> None:
        self.ws, self.state, self.subscription = ws, state, subscription
        self.consumer = consumer
        self.granted = 0
        self.sent = 0
        self.credit = asyncio.Event()

    async def send(self) -> None:
        """Send batches while there is credit; an error is a last text frame and a close."""
        try:
            while True:
                left = self.granted - self.sent
                if left <= 0:
                    self.credit.clear()
                    await self.credit.wait()
                    continue
                delivery = await self.subscription.next(left, False, None)
                if delivery is None:
                    continue
                if delivery.data:
                    await self.ws.send_bytes(delivery.data)
                    SERVE_SENT_BYTES.inc(len(delivery.data))
                self.sent += delivery.rows
        except MoonishError as error:
            await self.fail(error)

    async def fail(self, error: MoonishError) -> None:
        status, body = error_body(error)
        with contextlib.suppress(ConnectionError):
            await self.ws.send_str(orjson.dumps(body).decode())
        await self.ws.close(code=ws_close_code(status), message=body["error"].encode())

    async def handle(self, text: str) -> bool:
        """Act on one client message; False once the feed ends (cancel)."""
        message = _message(text)
        if "request" in message:
            n = message["request"]
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise InvalidArgumentError("request takes a whole number of rows >= 1")
            limit = self.state.options.limits.max_credit
            if self.granted + n - self.sent > limit:
                raise LimitExceededError(
                    "max_credit", limit, f"more than {limit} rows granted and not yet sent"
                )
            self.granted += n
            self.credit.set()
        if "ack" in message:
            if self.consumer is None:
                raise InvalidArgumentError("ack confirms a consumer's position: open with consumer")
            token = message["ack"]
            if not isinstance(token, str):
                raise InvalidArgumentError("ack takes a token")
            done = await asyncio.to_thread(ack, self.state.data_dir, self.consumer.name, token)
            reply = {"acked": {"name": done.name, "token": str(Token(done.positions))}}
            await self.ws.send_str(orjson.dumps(reply).decode())
        return message.get("cancel") is not True


def _message(text: str) -> dict[str, Any]:
    try:
        message = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise InvalidArgumentError("a message is a JSON object") from None
    if not isinstance(message, dict) or not set(message) & {"request", "ack", "cancel"}:
        raise InvalidArgumentError('a message holds "request", "ack" or "cancel"')
    return message


async def websocket(request: web.Request, state: ServerState) -> web.StreamResponse:
    """``GET /v1/ws`` (see the module docstring)."""
    params = FeedParams.parse(
        request.query, None, state.options.limits, WS_PARAMS, server_keys=state.keys
    )
    limits = state.options.limits
    with state.subscriber():
        token, owner = await asyncio.to_thread(state.start, params.since, params.consumer)
        ws = web.WebSocketResponse(
            heartbeat=limits.idle_timeout_ms / 2000, max_msg_size=limits.max_request_bytes
        )
        await ws.prepare(request)
        state.websockets.add(ws)
        subscription = Subscription(state, token, ROWS, params.where, params.resolved_ms, owner)
        feed = _Feed(ws, state, subscription, owner)
        sender: asyncio.Task[None] | None = None
        try:
            await ws.send_str(orjson.dumps({"token": str(token)}).decode())
            sender = asyncio.create_task(feed.send())
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    try:
                        going = await feed.handle(message.data)
                    except MoonishError as error:
                        sender.cancel()
                        await feed.fail(error)
                        break
                    if not going:
                        sender.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await sender
                        last = {"last_seq": str(subscription.token)}
                        await ws.send_str(orjson.dumps(last).decode())
                        await ws.close(code=1000)
                        break
                elif message.type == WSMsgType.BINARY:
                    sender.cancel()
                    await ws.close(code=1003, message=b"send text messages")
                    break
        except ConnectionError:
            pass
        finally:
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await sender
            await subscription.close()
            state.websockets.discard(ws)
    return ws
