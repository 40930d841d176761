"""``GET /v1/changes``: CouchDB's ``_changes`` feeds over the merged change stream.

Parameters (docs/server.md has examples):

- ``feed``: ``normal`` (default: one read, like ``cdc read``), ``longpoll`` (waits for at
  least one change or ``timeout``), ``continuous`` (NDJSON until ``timeout``),
  ``eventsource`` (server-sent events; ``Last-Event-ID`` overrides ``since``).
- ``since``: a token, ``earliest`` or ``now`` (default: ``now`` for the waiting feeds and
  ``earliest`` for ``normal``); or ``consumer=<name>``: a named consumer's position.
- ``limit``: most changes (``normal``: 1..10,000, default 256; others: no limit by default);
  an atomic batch is never cut, so the last one may go past it.
- ``heartbeat`` (ms, or ``true`` for 60,000): written when the feed is idle that long; keeps
  the feed open, overriding ``timeout``. ``timeout`` (ms, default 60,000).
- ``resolved`` (ms): resolved watermark markers at most this often (not with ``normal``).
- filters ``db``, ``key_prefix``, ``op``, ``type`` (comma-separated), ``include_keys`` and
  ``exclude_keys`` (one Redis glob pattern each, repeatable; ANDed with the server's own
  ``--include-keys``/``--exclude-keys``, which apply to every feed): other changes are not
  sent but still move the position (``last_seq``).

Responses: ``normal`` and ``longpoll``: ``{"results":[{"seq","change"},...],"last_seq",
"pending"}``; ``continuous``: NDJSON rows (moonish.serve.chunks), then ``{"last_seq",
"pending"}`` at ``timeout`` or ``limit``; ``eventsource``: SSE events. Headers are sent at
once. An error before the feed starts is an HTTP status with a JSON body; inside an open
feed it is a last frame (NDJSON: the error object; SSE: ``event: error``) and the response
ends, never a stall.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson
from aiohttp import web
from multidict import MultiMapping

from moonish.cdc.merged_read import read_merged
from moonish.cdc.shard_read import DEFAULT_LIMIT, MAX_LIMIT
from moonish.cdc.token import EARLIEST, Token
from moonish.datadir.consumers import Consumer
from moonish.errors import InvalidArgumentError, MoonishError
from moonish.metrics.families import SERVE_SENT_BYTES
from moonish.serve.chunks import ROWS, SSE, Filter, Framing, KeyRule, chunk_of
from moonish.serve.errors import error_body
from moonish.serve.hub import ServerState
from moonish.serve.options import Limits
from moonish.serve.sink import Sink
from moonish.serve.subscription import Subscription

FEEDS = ("normal", "longpoll", "continuous", "eventsource")
FILTER_PARAMS = frozenset({"db", "key_prefix", "op", "type", "include_keys", "exclude_keys"})
"""The filters of a feed, ``/v1/changes`` and ``/v1/ws`` alike (:class:`Filter`)."""
PARAMS = (
    frozenset(
        {"feed", "since", "consumer", "limit", "heartbeat", "timeout", "resolved", "access_token"}
    )
    | FILTER_PARAMS
)
DEFAULT_HEARTBEAT_MS = 60_000
MAX_SCAN_RECORDS = 100_000
"""A filtered ``normal`` read looks at most this many records (``pending`` tells the rest)."""


@dataclass(frozen=True, slots=True)
class FeedParams:
    """A feed request's parameters (see the module docstring)."""

    feed: str
    since: str | None
    consumer: str | None
    limit: int | None
    heartbeat_ms: int | None
    timeout_ms: int
    resolved_ms: int | None
    where: Filter

    @classmethod
    def parse(
        cls,
        query: MultiMapping[str],
        last_event_id: str | None,
        limits: Limits,
        stream_params: frozenset[str] = PARAMS,
        server_keys: KeyRule | None = None,
    ) -> FeedParams:
        """Parse a request's query (``Last-Event-ID`` overrides ``since``); the filter is
        ANDed with ``server_keys``, the server's own key patterns.

        Raises:
            InvalidArgumentError: an unknown parameter or a bad value (a key pattern
                moonish.keypatterns refuses).
        """
        unknown = sorted(set(query) - stream_params)
        if unknown:
            raise InvalidArgumentError(f"unknown parameter {unknown[0]!r}")
        feed = query.get("feed", "normal")
        if feed not in FEEDS:
            raise InvalidArgumentError(f"feed is one of {', '.join(FEEDS)}; got {feed!r}")
        since = query.get("since")
        consumer = query.get("consumer")
        if last_event_id and feed == "eventsource":
            since, consumer = last_event_id, None  # the browser resumes where it was
        if since is None and consumer is None and feed == "normal":
            since = EARLIEST
        top = MAX_LIMIT if feed == "normal" else 2**62
        limit = _number(query, "limit", 1, top)
        if limit is None and feed == "normal":
            limit = DEFAULT_LIMIT
        heartbeat = query.get("heartbeat")
        heartbeat_ms = (
            DEFAULT_HEARTBEAT_MS
            if heartbeat == "true"
            else _number(query, "heartbeat", limits.min_heartbeat_ms, limits.max_timeout_ms)
        )
        timeout_ms = _number(query, "timeout", 0, 2**62)
        resolved_ms = _number(query, "resolved", limits.min_heartbeat_ms, limits.max_timeout_ms)
        if feed in ("normal", "longpoll") and resolved_ms is not None:
            raise InvalidArgumentError("resolved goes with the continuous and eventsource feeds")
        where = Filter.parse(
            query.get("db"),
            query.get("key_prefix"),
            query.get("op"),
            query.get("type"),
            query.getall("include_keys", []),
            query.getall("exclude_keys", []),
            server_keys,
        )
        return cls(
            feed,
            since,
            consumer,
            limit,
            heartbeat_ms,
            min(
                limits.default_timeout_ms if timeout_ms is None else timeout_ms,
                limits.max_timeout_ms,
            ),
            resolved_ms,
            where,
        )


def _number(query: MultiMapping[str], name: str, low: int, high: int) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise InvalidArgumentError(f"{name} must be a whole number from {low} to {high}")
    return int(text)


async def changes(request: web.Request, state: ServerState) -> web.StreamResponse:
    """``GET /v1/changes``."""
    params = FeedParams.parse(
        request.query,
        request.headers.get("Last-Event-ID"),
        state.options.limits,
        server_keys=state.keys,
    )
    if params.feed == "normal":
        return await _normal(state, params)
    with state.subscriber():
        token, owner = await asyncio.to_thread(state.start, params.since, params.consumer)
        if params.feed == "longpoll":
            return await _longpoll(request, state, params, token, owner)
        return await _stream(request, state, params, token, owner)


async def _normal(state: ServerState, params: FeedParams) -> web.Response:
    def run() -> bytes:
        token, _ = state.start(params.since, params.consumer)
        parts: list[bytes] = []
        rows, scanned, limit = 0, 0, params.limit or DEFAULT_LIMIT
        where = params.where
        while rows < limit and scanned < MAX_SCAN_RECORDS:
            result = read_merged(
                state.data_dir, token, limit - rows, messages=state.options.messages
            )
            if not result.events and result.token == token:
                break
            chunk = chunk_of(result.events, token)
            if where.everything:
                parts.append(chunk.framed(ROWS, 0, len(chunk)))
                rows += len(chunk)
            else:
                keep = where.select(chunk.frames, chunk.ops, 0, len(chunk))
                parts += chunk.framed_each(ROWS, keep)
                rows += len(keep)
            scanned += len(chunk)
            token = result.token
        return _results(b"".join(parts), token, state.pending(token))

    body = await asyncio.to_thread(run)
    SERVE_SENT_BYTES.inc(len(body))
    return web.Response(body=body, content_type="application/json")


def _results(lines: bytes, token: Token, pending: int) -> bytes:
    """``{"results":[...],"last_seq":...,"pending":...}`` of NDJSON row lines (envelopes
    hold no raw newline, so a newline is always between two rows)."""
    inner = lines.rstrip(b"\n").replace(b"\n", b",\n")
    return b'{"results":[%b],"last_seq":"%b","pending":%d}\n' % (
        inner,
        str(token).encode(),
        pending,
    )


async def _longpoll(
    request: web.Request,
    state: ServerState,
    params: FeedParams,
    token: Token,
    owner: Consumer | None,
) -> web.StreamResponse:
    """Waits for at least one change (or ``timeout``) and answers like ``normal``. With
    ``heartbeat`` the headers go out at once and a newline every ``heartbeat`` ms (an error
    then comes as the JSON body, with status 200 already sent); without, the answer (or the
    error's status) comes in one piece."""
    timer = state.timer
    subscription = Subscription(state, token, ROWS, params.where, None, owner)
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    beat = params.heartbeat_ms
    if beat is not None:
        await response.prepare(request)
    deadline = None if beat is not None else timer.now_ms() + params.timeout_ms
    data = b""
    try:
        while True:
            next_beat = None if beat is None else timer.now_ms() + beat
            until = next_beat if next_beat is not None else deadline
            delivery = await subscription.next(params.limit, True, until)
            if delivery is not None and delivery.rows:
                data = delivery.data
                break
            if delivery is None and beat is not None:
                await response.write(b"\n")
            if deadline is not None and timer.now_ms() >= deadline:
                break
        body = _results(
            data, subscription.token, await asyncio.to_thread(state.pending, subscription.token)
        )
    except MoonishError as error:
        if beat is None:
            raise
        body = orjson.dumps(error_body(error)[1]) + b"\n"
    finally:
        await subscription.close()
    SERVE_SENT_BYTES.inc(len(body))
    if beat is None:
        return web.Response(body=body, content_type="application/json")
    await response.write(body)
    await response.write_eof()
    return response


async def _stream(
    request: web.Request,
    state: ServerState,
    params: FeedParams,
    token: Token,
    owner: Consumer | None,
) -> web.StreamResponse:
    """``continuous`` and ``eventsource``: headers at once, then batches as they come."""
    framing: Framing = SSE if params.feed == "eventsource" else ROWS
    content_type = "text/event-stream" if framing is SSE else "application/x-ndjson"
    response = web.StreamResponse(
        headers={
            "Content-Type": content_type,
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    if request.version >= (1, 1):
        response.enable_chunked_encoding()  # (what aiohttp picks anyway; Sink frames alike)
    await response.prepare(request)
    timer = state.timer
    sink = Sink(request, response)
    subscription = Subscription(
        state, token, framing, params.where, params.resolved_ms, owner, sink
    )
    beat = params.heartbeat_ms
    deadline = None if beat is not None else timer.now_ms() + params.timeout_ms
    left = params.limit
    unseen = False  # the position moved past filtered changes since the client saw one
    try:
        try:
            written = timer.now_ms()  # when the feed last wrote
            next_beat = None if beat is None else written + beat
            while left is None or left > 0:
                until = next_beat if next_beat is not None else deadline
                delivery = await subscription.next(left, True, until)
                now = timer.now_ms()
                written = max(written, subscription.carried_ms)  # the ring wrote for it
                if delivery is not None:
                    if delivery.data:
                        await sink.send(delivery.data)
                        written = now
                    unseen = delivery.moved or (unseen and not delivery.data)
                    if left is not None:
                        left -= delivery.rows
                    continue
                if beat is not None and next_beat is not None and now >= next_beat:
                    if now - written >= beat:  # idle for a whole heartbeat
                        await response.write(framing.heartbeat(subscription.token, unseen))
                        unseen, written = False, now
                    next_beat = written + beat  # (moved once per heartbeat, not per write)
                elif deadline is not None and now >= deadline:
                    break
            pending = await asyncio.to_thread(state.pending, subscription.token)
            await response.write(_end(framing, subscription.token, pending))
        except MoonishError as error:
            await response.write(_error_frame(framing, error))
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away
    finally:
        await subscription.close()
    return response


def _end(framing: Framing, token: Token, pending: int) -> bytes:
    if framing is SSE:
        return framing.position(token)
    return b'{"last_seq":"%b","pending":%d}\n' % (str(token).encode(), pending)


def _error_frame(framing: Framing, error: MoonishError) -> bytes:
    body = orjson.dumps(error_body(error)[1])
    if framing is SSE:
        return b"event: error\ndata: " + body + b"\n\n"
    return body + b"\n"
