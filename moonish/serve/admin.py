"""``GET /v1/info`` and ``/v1/consumers``: what the log holds, and named consumers over HTTP.

| method and path | what | body in | answer |
|---|---|---|---|
| ``GET /v1/info`` | ``cdc info`` of every shard, the tokens ``earliest`` and ``now``, the lag table, the live capture writing the data directory (``capture.json``, or ``null``), the server's own figures and their last hour (``server.history``, moonish.serve.history) | | 200 |
| ``GET /v1/consumers`` | the lag table (``consumer list --json``) | | 200 ``{"consumers":[...]}`` |
| ``POST /v1/consumers`` | create | ``{"name", "from"?, "owner"?, "replace"?}`` | 201 the consumer's lag |
| ``GET /v1/consumers/<name>`` | one consumer's lag | | 200 |
| ``POST /v1/consumers/<name>/ack`` | confirm up to a token (forward only) | ``{"token"}`` | 200 ``{"name","token"}`` |
| ``POST /v1/consumers/<name>/seek`` | move anywhere, clear ``lost`` | ``{"position"}`` | 200 ``{"name","token"}`` |
| ``DELETE /v1/consumers/<name>`` | drop | | 200 ``{"name","dropped":true}`` |
"""  # noqa: E501

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from moonish.cdc import lag, shard_read
from moonish.cdc.positions import earliest, now, resolve
from moonish.cdc.token import EARLIEST, NOW, Token
from moonish.datadir import consumers
from moonish.errors import ConsumerNotFoundError, InvalidArgumentError, MoonishError
from moonish.redis.capture.status import read_status
from moonish.serve.errors import ConflictError, RequestTooLargeError
from moonish.serve.hub import ServerState
from moonish.version import __version__


def json_response(document: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(document), status=status, content_type="application/json")


async def info(request: web.Request, state: ServerState) -> web.Response:
    """``GET /v1/info``."""

    def run() -> dict[str, Any]:
        return {
            "data_dir": state.data_dir,
            "shards": [shard_read.info(shard) for shard in state.shards],
            "earliest": str(earliest(state.shards)),
            "now": str(now(state.shards)),
            "consumers": [entry.to_json() for entry in lag.lag_table(state.data_dir)],
            "capture": capture_status(state.data_dir),
        }

    document = await asyncio.to_thread(run)
    ring = state.ring
    document["server"] = {
        "version": __version__,
        "subscribers": state.subscribers,
        "events": ring.end,
        "resyncs": state.resyncs,
        "carried": state.ring.carried,
        "max_subscribers": state.options.limits.max_subscribers,
        "ring": {
            "events": ring.end - ring.first,
            "bytes": ring.nbytes,
            "max_bytes": ring.max_bytes,
            "first_token": str(ring.base),
            "last_token": str(ring.token),
            "resolved": None if ring.resolved is None else orjson.loads(ring.resolved.to_json()),
            "error": None if ring.error is None else str(ring.error),
        },
        "history": state.history.to_json(state.clock.now_us()),
    }
    return json_response(document)


def capture_status(data_dir: str) -> dict[str, Any] | None:
    """The live capture that writes ``data_dir``, as ``moonish cdc info`` shows it (its
    ``capture.json``; moonish.redis.capture.status), ``None`` without one, or ``{"error":
    ...}`` for a file that cannot be read (the rest of the answer stands)."""
    try:
        return read_status(data_dir)
    except MoonishError as error:
        return {"error": str(error)}


async def body_of(request: web.Request, state: ServerState) -> dict[str, Any]:
    """A request's JSON object body (empty: ``{}``).

    Raises:
        RequestTooLargeError: larger than ``max_request_bytes``.
        InvalidArgumentError: not a JSON object.
    """
    limit = state.options.limits.max_request_bytes
    if request.content_length is not None and request.content_length > limit:
        raise RequestTooLargeError(limit)
    raw = await request.content.read(limit + 1)
    if len(raw) > limit:
        raise RequestTooLargeError(limit)
    if not raw.strip():
        return {}
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidArgumentError("the body is not JSON") from None
    if not isinstance(document, dict):
        raise InvalidArgumentError("the body is a JSON object")
    return document


def _text(body: dict[str, Any], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name!r} is a string" + ("" if default else " (required)"))
    return value


async def list_consumers(request: web.Request, state: ServerState) -> web.Response:
    """``GET /v1/consumers``."""
    table = await asyncio.to_thread(lag.lag_table, state.data_dir)
    return json_response({"consumers": [entry.to_json() for entry in table]})


async def create_consumer(request: web.Request, state: ServerState) -> web.Response:
    """``POST /v1/consumers``."""
    body = await body_of(request, state)
    name = _text(body, "name")
    start = _text(body, "from", NOW)
    owner = _text(body, "owner", "http")
    replace = body.get("replace", False)
    if not isinstance(replace, bool):
        raise InvalidArgumentError("'replace' is true or false")

    def run() -> dict[str, object]:
        if not replace:
            try:
                consumers.load(state.data_dir, name)
            except ConsumerNotFoundError:
                pass
            else:
                raise ConflictError(name, f"consumer {name!r} exists (seek, drop or replace it)")
        token = resolve(state.shards, start)
        made = consumers.create(state.data_dir, name, token.positions, owner=owner, replace=replace)
        return lag.describe(state.data_dir, made.name).to_json()

    return json_response(await asyncio.to_thread(run), status=201)


async def show_consumer(request: web.Request, state: ServerState) -> web.Response:
    """``GET /v1/consumers/<name>``."""
    name = request.match_info["name"]
    entry = await asyncio.to_thread(lag.describe, state.data_dir, name)
    return json_response(entry.to_json())


async def ack_consumer(request: web.Request, state: ServerState) -> web.Response:
    """``POST /v1/consumers/<name>/ack`` with ``{"token"}``."""
    return await _move(request, state, consumers.ack, "token")


async def seek_consumer(request: web.Request, state: ServerState) -> web.Response:
    """``POST /v1/consumers/<name>/seek`` with ``{"position"}`` (a token, earliest, now)."""
    return await _move(request, state, consumers.seek, "position")


async def _move(request: web.Request, state: ServerState, how: Any, field: str) -> web.Response:
    name = request.match_info["name"]
    body = await body_of(request, state)
    text = _text(body, field)
    if field == "token" and text == EARLIEST:
        raise InvalidArgumentError("an ack takes a token or now")

    def run() -> dict[str, str]:
        done = how(state.data_dir, name, resolve(state.shards, text).positions)
        return {"name": done.name, "token": str(Token(done.positions))}

    return json_response(await asyncio.to_thread(run))


async def drop_consumer(request: web.Request, state: ServerState) -> web.Response:
    """``DELETE /v1/consumers/<name>``."""
    name = request.match_info["name"]
    await asyncio.to_thread(consumers.drop, state.data_dir, name)
    return json_response({"name": name, "dropped": True})
