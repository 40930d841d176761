"""Errors of the remote client, and the server's error bodies as moonish errors.

A server answers an error with CouchDB's shape, ``{"error": <code>, "reason": <text>}`` plus
machine fields (docs/server.md, "Errors"); :func:`error_from_body` turns it back into the
exception an in-process read would have raised, with the same fields, so a caller (and the
CLI's exit codes) cannot tell a remote read's failure from a local one:

| ``error`` | raised | CLI exit |
|---|---|---|
| ``bad_request``, ``not_found``, ``conflict``, ``request_too_large``, ``method_not_allowed`` | :class:`~moonish.errors.InvalidArgumentError` (``not_found`` of a consumer: ``ConsumerNotFoundError``) | 2 |
| ``unauthorized`` | :class:`RemoteUnauthorizedError` | 2 |
| ``not_retained`` | :class:`~moonish.errors.PositionNotRetainedError` | 3 |
| ``consumer_lost`` | :class:`~moonish.errors.ConsumerLostError` | 3 |
| ``corruption`` | :class:`~moonish.errors.CorruptionError` | 4 |
| ``unsupported`` | :class:`~moonish.errors.UnsupportedFormatError` | 5 |
| ``unavailable``, ``too_many_requests``; no answer | :class:`RemoteUnavailableError` | 6 |
| ``internal``; an answer this client cannot read | :class:`RemoteProtocolError` | 1 |
"""  # noqa: E501

from __future__ import annotations

from typing import Any

from moonish.errors import (
    ConsumerLostError,
    ConsumerNotFoundError,
    CorruptionError,
    InvalidArgumentError,
    MoonishError,
    PositionNotRetainedError,
    UnavailableError,
    UnsupportedFormatError,
)


class RemoteUnauthorizedError(InvalidArgumentError):
    """The server wants a valid bearer token (HTTP 401): none was given, or another one.
    Retrying with the same token fails again (CLI exit 2).

    Attributes:
        url: the server's base URL.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(f"{url} wants a valid bearer token (--token-file, connect(token=...))")


class RemoteUnavailableError(UnavailableError):
    """The server did not answer (connection refused or dropped, a timeout), answered that it
    is stopping (503), or that a limit is reached (429). Retry later (CLI exit 6).

    Attributes:
        url: the server's base URL.
        status: the HTTP status, or ``None`` when there was no answer.
        retry_after_ms: how long the server asked to wait, or ``None``.
    """

    def __init__(
        self,
        url: str,
        message: str,
        *,
        status: int | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        self.url, self.status, self.retry_after_ms = url, status, retry_after_ms
        super().__init__(f"{url}: {message}")


class RemoteProtocolError(MoonishError):
    """The answer is not what a moonish server sends (not JSON, a framing this client does
    not read, an ``internal`` error of the server). Not retried; names the URL and what came.

    Attributes:
        url: the request's URL.
        status: the HTTP status, or ``None``.
    """

    def __init__(self, url: str, message: str, *, status: int | None = None) -> None:
        self.url, self.status = url, status
        super().__init__(f"{url}: {message}")


def error_from_body(url: str, status: int, body: Any) -> MoonishError:
    """The moonish error for an error answer (``body``: the parsed JSON, or anything else).

    Args:
        url: the request's URL (named in errors that have no path of their own).
        status: the HTTP status (also of an error frame inside an open feed: its ``error``
            code decides, ``status`` only when there is none).
        body: the parsed error body.
    """
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        if status in (429, 502, 503, 504):
            return RemoteUnavailableError(url, f"HTTP {status}", status=status)
        return RemoteProtocolError(
            url, f"HTTP {status} without a moonish error body", status=status
        )
    code: str = body["error"]
    reason = str(body.get("reason", code))
    path, lsn = body.get("path"), body.get("lsn")
    if code == "unauthorized":
        return RemoteUnauthorizedError(url)
    if code in ("unavailable", "too_many_requests"):
        retry = 1000 if code == "too_many_requests" else None
        return RemoteUnavailableError(url, reason, status=status, retry_after_ms=retry)
    if code == "not_found" and "consumer" in body:
        return ConsumerNotFoundError(str(body["consumer"]), path=path)
    if code in ("bad_request", "not_found", "conflict", "request_too_large"):
        return InvalidArgumentError(reason, path=path, lsn=lsn)
    if code == "method_not_allowed":
        return InvalidArgumentError(reason)
    if code == "consumer_lost":
        return _consumer_lost(body, reason)
    if code == "not_retained":
        return PositionNotRetainedError(
            reason,
            shard=int(body.get("shard") or 0),
            oldest_lsn=int(body.get("oldest_lsn") or 0),
            lsn=lsn,
            path=path,
            token=str(body.get("token")),
            oldest_token=str(body.get("oldest_token")),
            gone=int(body.get("gone") or 0),
        )
    if code == "corruption":
        return CorruptionError(reason, path=path, offset=body.get("offset"), lsn=lsn)
    if code == "unsupported":
        return UnsupportedFormatError(reason, path=path, lsn=lsn)
    return RemoteProtocolError(url, f"{code}: {reason}", status=status)


def _consumer_lost(body: dict[str, Any], reason: str) -> ConsumerLostError:
    error = ConsumerLostError(
        str(body.get("consumer")),
        status=str(body.get("status")),
        reason=body.get("lost_reason"),
        shard=int(body.get("shard") or 0),
        requested_lsn=int(body.get("lsn") or 0),
        oldest_lsn=int(body.get("oldest_lsn") or 0),
        gone=int(body.get("gone") or 0),
        oldest_token=body.get("oldest_token"),
        path=body.get("path"),
    )
    error.message = reason  # the server's words, which name what it saw
    error.args = (reason,)
    return error
