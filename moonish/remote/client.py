"""The client of a ``moonish serve`` server: :func:`connect` and :class:`Client`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from moonish.cdc.cursor import Cursor
from moonish.cdc.shard_read import DEFAULT_LIMIT
from moonish.cdc.token import EARLIEST, NOW, Token
from moonish.errors import InvalidArgumentError
from moonish.remote.errors import RemoteProtocolError
from moonish.remote.events import RemoteResult, parse_results
from moonish.remote.options import ClientOptions, base_url
from moonish.remote.tail import RemoteTail

if TYPE_CHECKING:
    from moonish.remote.transport import Transport

Position = Token | str | None
"""A token, its text, ``earliest`` or ``now`` (``None``: ``earliest``)."""


def connect(url: str, token: str | None = None, options: ClientOptions | None = None) -> Client:
    """A client of the server at ``url`` (``http[s]://host:port``, a prefix allowed).

    Nothing is sent until the first call; the connection is kept alive between calls.

    Args:
        url: the server's base URL; ``/v1`` or ``/v1/changes`` at its end is ignored.
        token: the bearer token, for a server started with ``--token-file``.
        options: TLS (``cafile``), timeouts, heartbeats and reconnect backoff.

    Raises:
        InvalidArgumentError: a URL that is not http(s)://host[:port][/prefix]; a ``cafile``
            that does not load.
    """
    return Client(url, token, options)


class Client:
    """The read API of ``moonish.read``/``moonish.tail``/``moonish.ack`` over HTTP, and the
    server's consumers. Thread-safe; use as a context manager or call :meth:`close`.

    Every method raises what the server answered as the moonish error an in-process call
    raises (moonish.remote.errors), ``RemoteUnavailableError`` when no answer came, and
    ``RemoteUnauthorizedError`` for a missing or wrong token.
    """

    def __init__(
        self, url: str, token: str | None = None, options: ClientOptions | None = None
    ) -> None:
        from moonish.remote.transport import Transport  # aiohttp: only once a client exists

        if token is not None and (not token.strip() or any(c in token for c in "\r\n")):
            raise InvalidArgumentError("a bearer token is one non-empty line")
        self.options = options or ClientOptions()
        self._transport: Transport = Transport(base_url(url), token, self.options)

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self._transport.url

    def read(
        self,
        position: Position = None,
        limit: int = DEFAULT_LIMIT,
        *,
        consumer: str | None = None,
    ) -> RemoteResult:
        """Up to ``limit`` changes after ``position`` (``GET /v1/changes``, ``feed=normal``),
        in stream order; an atomic batch is never cut (the last may pass ``limit``).

        Args:
            position: a token, ``earliest`` (default) or ``now``.
            limit: most changes, 1..10,000.
            consumer: read from this named consumer's confirmed position instead (it is not
                moved: :meth:`ack` what was processed).

        Returns:
            ``.events`` (:class:`RemoteEvent` items, ``.envelopes`` the bytes), ``.token``
            (where to resume: the requested position when nothing was new), ``.pending``.

        Raises:
            InvalidArgumentError: a bad position or limit, a token of another shard count or
                past a shard's end; both ``position`` and ``consumer``.
            ConsumerNotFoundError, ConsumerLostError, PositionNotRetainedError,
                CorruptionError: as ``moonish.read``.
        """
        params = {"feed": "normal", "limit": str(limit), **self._start(position, consumer)}
        raw = self._transport.run(self._transport.request("GET", "/v1/changes", params))
        parsed = parse_results(raw)
        if parsed is None:
            raise RemoteProtocolError(self.url, "not a /v1/changes answer")
        batch, pending = parsed
        return RemoteResult(batch.token, batch, pending)

    def tail(
        self,
        position: Position = None,
        *,
        consumer: str | None = None,
        follow: bool = False,
        resolved_ms: int | None = None,
    ) -> RemoteTail:
        """An iterator of the changes after ``position`` (moonish.remote.tail): to the end
        of the log, or with ``follow`` for ever, reconnecting after failures from the last
        token received.

        Args:
            position: a token, ``earliest`` (default) or ``now``, resolved to a token now.
            consumer: start from this consumer's confirmed position (not moved: :meth:`ack`).
            follow: keep waiting for changes (``close()`` ends it, from any thread).
            resolved_ms: also yield ``Resolved`` markers at most this often (with ``follow``).

        Raises:
            InvalidArgumentError: a bad position; both ``position`` and ``consumer``;
                ``resolved_ms`` without ``follow`` (markers come from the server's live feed).
            ConsumerNotFoundError: no such consumer.
        """
        if resolved_ms is not None and not follow:
            raise InvalidArgumentError("resolved_ms goes with follow=True over a server")
        where = self._start(position, consumer)
        if consumer is not None:
            start = Token.parse(str(self.consumer(consumer)["token"]))
        elif where["since"] in (EARLIEST, NOW):
            start = Token.parse(str(self.info()[where["since"]]))
        else:
            start = Token.parse(where["since"])
        return RemoteTail(
            self._transport, start, consumer=consumer, follow=follow, resolved_ms=resolved_ms
        )

    def ack(self, consumer: str, token: Token | str) -> Token:
        """Confirm that ``consumer`` processed everything up to ``token`` (or ``now``);
        positions only move forward. Returns the consumer's stored token.

        Raises:
            ConsumerNotFoundError, ConsumerLostError, InvalidArgumentError: as ``moonish.ack``.
        """
        answer = self._json("POST", f"/v1/consumers/{_name(consumer)}/ack", {"token": str(token)})
        return Token.parse(str(answer["token"]))

    def info(self) -> dict[str, Any]:
        """``GET /v1/info``: every shard's ``cdc info``, ``earliest`` and ``now``, the lag
        table (``consumers``) and the server's figures (``server``)."""
        return self._json("GET", "/v1/info")

    def consumers(self) -> list[dict[str, Any]]:
        """The lag table: one entry per consumer (``consumer list --json``), by name."""
        return list(self._json("GET", "/v1/consumers")["consumers"])

    def consumer(self, name: str) -> dict[str, Any]:
        """One consumer's lag and ``token``.

        Raises:
            ConsumerNotFoundError: no such consumer.
        """
        return self._json("GET", f"/v1/consumers/{_name(name)}")

    def create_consumer(
        self,
        name: str,
        start: Position = NOW,
        *,
        owner: str | None = None,
        replace: bool = False,
    ) -> dict[str, Any]:
        """Create a consumer at ``start`` (a token, ``earliest`` or ``now``); its lag entry.

        Raises:
            InvalidArgumentError: a bad name or position; it exists and not ``replace``.
        """
        body: dict[str, Any] = {"name": name, "from": str(start or EARLIEST), "replace": replace}
        if owner is not None:
            body["owner"] = owner
        return self._json("POST", "/v1/consumers", body)

    def seek(self, name: str, position: Position) -> Token:
        """Move a consumer to ``position`` (back or forward; clears ``lost``); its token.

        Raises:
            ConsumerNotFoundError, InvalidArgumentError: as ``moonish consumer seek``.
        """
        body = {"position": str(position or EARLIEST)}
        answer = self._json("POST", f"/v1/consumers/{_name(name)}/seek", body)
        return Token.parse(str(answer["token"]))

    def drop(self, name: str) -> None:
        """Drop a consumer.

        Raises:
            ConsumerNotFoundError: no such consumer.
        """
        self._json("DELETE", f"/v1/consumers/{_name(name)}")

    def close(self) -> None:
        """Close the connections (open tails end). Idempotent."""
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        raw = self._transport.run(self._transport.request(method, path, None, body))
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError:
            document = None
        if not isinstance(document, dict):
            raise RemoteProtocolError(self.url + path, "the answer is not a JSON object")
        return document

    @staticmethod
    def _start(position: Position, consumer: str | None) -> dict[str, str]:
        if consumer is not None:
            if position is not None:
                raise InvalidArgumentError("give a position or a consumer, not both")
            return {"consumer": consumer}
        if isinstance(position, int | Cursor):
            raise InvalidArgumentError(
                "a server serves the merged stream: give a token, earliest or now, not an LSN"
            )
        return {"since": EARLIEST if position is None else str(position).strip()}


def _name(name: str) -> str:
    return quote(name, safe="")
