"""Errors of the change feed server, and how every moonish error looks over HTTP.

A response body is CouchDB's shape, ``{"error": <code>, "reason": <text>}``, plus machine
fields the caller can act on without parsing ``reason`` (docs/server.md, "Errors"):

| code | status | when |
|---|---|---|
| ``bad_request`` | 400 | a bad parameter, token, limit, body (``InvalidArgumentError``) |
| ``unauthorized`` | 401 | no valid bearer token (nothing else is said) |
| ``not_found`` | 404 | no such consumer, no such path |
| ``method_not_allowed`` | 405 | a path that exists, another method |
| ``conflict`` | 409 | creating a consumer that exists (without ``replace``) |
| ``not_retained`` | 410 | the position is no longer retained (``oldest_token``, ``gone``) |
| ``consumer_lost`` | 410 | the consumer is lost (``consumer``, ``status``, ``gone``, ...) |
| ``request_too_large`` | 413 | a body or message over the limit |
| ``too_many_requests`` | 429 | a limit (``limit``, ``value``) is reached |
| ``corruption`` | 500 | damage in the log (``path``, ``offset``, ``lsn``) |
| ``unsupported`` | 500 | a format this build does not read |
| ``unavailable`` | 503 | temporarily unavailable (a shard locked, the server stopping) |
| ``internal`` | 500 | a bug |
"""

from __future__ import annotations

from typing import Any

from moonish.errors import (
    ConsumerLostError,
    ConsumerNotFoundError,
    CorruptionError,
    InvalidArgumentError,
    LsnNotRetainedError,
    MoonishError,
    PositionNotRetainedError,
    UnavailableError,
    UnsupportedFormatError,
)


class LimitExceededError(UnavailableError):
    """A server limit is reached (HTTP 429, or a WebSocket close code 4429).

    Attributes:
        limit: the limit's name (``max_subscribers``, ``max_credit``).
        value: its configured value.
    """

    def __init__(self, limit: str, value: int, message: str) -> None:
        self.limit, self.value = limit, value
        super().__init__(message)


class UnauthorizedError(MoonishError):
    """A request without a valid bearer token (HTTP 401). Its message says nothing about
    the server, the data or the token."""

    kind = "unauthorized"


class ConflictError(InvalidArgumentError):
    """The request conflicts with what exists (HTTP 409): a consumer of that name.

    Attributes:
        consumer: the name.
    """

    def __init__(self, consumer: str, message: str) -> None:
        self.consumer = consumer
        super().__init__(message)


class RequestTooLargeError(InvalidArgumentError):
    """A request body or WebSocket message over ``max_request_bytes`` (HTTP 413).

    Attributes:
        limit_bytes: the limit.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        super().__init__(f"the request is larger than the limit of {limit_bytes} bytes")


class NotFoundError(InvalidArgumentError):
    """No such path (HTTP 404)."""


def error_body(error: BaseException) -> tuple[int, dict[str, Any]]:
    """``(HTTP status, body)`` for ``error``; anything that is not a :class:`MoonishError`
    is a bug: ``500 internal`` without details (they go to the server's log)."""
    if not isinstance(error, MoonishError):
        return 500, {"error": "internal", "reason": "internal server error"}
    body: dict[str, Any] = {"reason": error.message}
    status, code = _status(error)
    body = {"error": code, **body}
    if isinstance(error, UnauthorizedError):
        return status, body
    for name in ("path", "offset", "lsn"):
        if getattr(error, name) is not None:
            body[name] = getattr(error, name)
    if isinstance(error, ConsumerLostError):
        body.update(
            consumer=error.consumer,
            status=error.status,
            lost_reason=error.reason,
            shard=error.shard,
            oldest_lsn=error.oldest_lsn,
            gone=error.gone,
            oldest_token=error.oldest_token,
        )
    elif isinstance(error, PositionNotRetainedError):
        body.update(
            token=error.token,
            shard=error.shard,
            oldest_lsn=error.oldest_lsn,
            gone=error.gone,
            oldest_token=error.oldest_token,
        )
    elif isinstance(error, LsnNotRetainedError):
        body["oldest_lsn"] = error.oldest_lsn
    elif isinstance(error, ConsumerNotFoundError | ConflictError):
        body["consumer"] = error.consumer
    elif isinstance(error, LimitExceededError):
        body.update(limit=error.limit, value=error.value)
    elif isinstance(error, RequestTooLargeError):
        body["limit_bytes"] = error.limit_bytes
    return status, body


def _status(error: MoonishError) -> tuple[int, str]:
    table: list[tuple[type[MoonishError], int, str]] = [
        (UnauthorizedError, 401, "unauthorized"),
        (ConsumerLostError, 410, "consumer_lost"),
        (LsnNotRetainedError, 410, "not_retained"),
        (ConsumerNotFoundError, 404, "not_found"),
        (NotFoundError, 404, "not_found"),
        (ConflictError, 409, "conflict"),
        (RequestTooLargeError, 413, "request_too_large"),
        (InvalidArgumentError, 400, "bad_request"),
        (LimitExceededError, 429, "too_many_requests"),
        (UnavailableError, 503, "unavailable"),
        (CorruptionError, 500, "corruption"),
        (UnsupportedFormatError, 500, "unsupported"),
    ]
    for kind, status, code in table:
        if isinstance(error, kind):
            return status, code
    return 500, "internal"


WS_CLOSE = {400: 4400, 401: 4401, 404: 4404, 409: 4409, 410: 4410, 413: 1009, 429: 4429}
"""WebSocket close codes by HTTP status (4000-4999 are the application's, RFC 6455 §7.4.2);
a server-side failure closes with 1011."""


def ws_close_code(status: int) -> int:
    """The WebSocket close code for an error of HTTP ``status``."""
    return WS_CLOSE.get(status, 1011)
