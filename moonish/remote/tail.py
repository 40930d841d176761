"""A remote change stream as an iterator: :class:`RemoteTail` (``Client.tail``).

Without ``follow`` it pages through ``feed=normal`` reads until the server has nothing after
its position (the end of the log when the server answered), as ``moonish.tail`` stops at the
current end. With ``follow`` it reads one ``feed=continuous`` response with heartbeats; when
the connection drops, the server stops (an ``unavailable`` frame), restarts, or is silent for
three heartbeats, it reconnects after a backoff (``ClientOptions.retry_*``) **from the token
after the last change it received**, so across any number of reconnects every change comes
once, in stream order: no gap, no duplicate
(tests/remote/test_followed_tail_across_server_kills.py SIGKILLs the server).
Changes it received before a failure are still yielded; an error frame is raised once they
are out.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from moonish.cdc.merged import Resolved
from moonish.cdc.shard_read import MAX_LIMIT
from moonish.cdc.token import Token
from moonish.errors import InvalidArgumentError, MoonishError
from moonish.remote.errors import RemoteProtocolError, RemoteUnavailableError, error_from_body
from moonish.remote.events import (
    RemoteBatch,
    RemoteEvent,
    event_of,
    parse_results,
    resolved_of,
    split_row,
)

if TYPE_CHECKING:
    from moonish.remote.transport import Stream, Transport

log = logging.getLogger("moonish.remote")
T = TypeVar("T")


class _Closed(Exception):
    """The tail was closed while a call was waiting."""


class RemoteTail:
    """Iterate a server's merged stream after a position (the shape of
    :class:`moonish.MergedTail`): :class:`RemoteEvent` items, and :class:`moonish.Resolved`
    markers when ``resolved_ms`` is given; :meth:`batches` for bulk output. Use as a context
    manager; :meth:`close` may be called from any thread and ends a blocked iteration.

    Made by :meth:`moonish.remote.Client.tail`, which resolves the start position first:
    ``earliest``/``now`` become the token the server had then, a consumer its confirmed token.

    Raises:
        InvalidArgumentError, PositionNotRetainedError, ConsumerLostError, CorruptionError:
            while iterating, as the server answered them (after the changes before them).
        RemoteUnavailableError: without ``follow``, the server did not answer; with
            ``follow``, reconnecting failed for ``ClientOptions.retry_for_ms``.
        RemoteUnauthorizedError: the token is refused (also after a reconnect).
    """

    def __init__(
        self,
        transport: Transport,
        start: Token,
        *,
        consumer: str | None,
        follow: bool,
        resolved_ms: int | None,
    ) -> None:
        self._transport = transport
        self._consumer = consumer  # asked for by name until the first answer
        self._follow, self._resolved_ms = follow, resolved_ms
        self._received = str(start)  # the position after the last line received
        self._token = start  # the position after the last item returned
        self._pending: deque[RemoteBatch | Resolved] = deque()
        self._head = 0  # next event of a batch at the head of _pending (iteration by event)
        self._failure: MoonishError | None = None  # raised once _pending is out
        self._ended = False  # (not follow) the server had nothing more
        self._closed = threading.Event()
        self._call: Any = None
        self._stream: Stream | None = None

    @property
    def token(self) -> Token:
        """Where to resume: the position after the last event (or marker) returned."""
        return self._token

    def __iter__(self) -> Iterator[RemoteEvent | Resolved]:
        return self

    def __next__(self) -> RemoteEvent | Resolved:
        while not self._pending:
            if not self._fill():
                raise StopIteration
        head = self._pending[0]
        if isinstance(head, Resolved):
            self._pending.popleft()
            self._token = head.token
            return head
        if self._head >= len(head):  # a batch that only moves the position
            self._pending.popleft()
            self._head, self._token = 0, head.token
            return self.__next__()
        i = self._head
        event = event_of(head.envelopes[i], head.seqs[i])
        self._head += 1
        if self._head == len(head):
            self._pending.popleft()
            self._head, self._token = 0, head.token
        else:
            self._token = event.token
        return event

    def batches(self) -> Iterator[RemoteBatch | Resolved]:
        """Items as they came from the server, in order: a batch of changes (possibly empty:
        the position moved past changes that were not sent), or a marker. The token moves
        past each item as it is yielded. Do not mix with ``next()``."""
        while True:
            while not self._pending:
                if not self._fill():
                    return
            item = self._pending.popleft()
            self._token = item.token
            yield item

    def close(self) -> None:
        """Stop: a blocked iteration ends (``StopIteration``), the connection is closed.
        Idempotent; from any thread."""
        self._closed.set()
        call, stream = self._call, self._stream
        self._stream = None
        if call is not None:
            call.cancel()
        if stream is not None:
            self._submit_quietly(stream)

    def __enter__(self) -> RemoteTail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _submit_quietly(self, stream: Stream) -> None:
        with contextlib.suppress(InvalidArgumentError):  # a closed client closed them all
            self._transport.submit(self._transport.close_stream(stream))

    def _wait(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._closed.is_set():
            coroutine.close()
            raise _Closed
        call = self._transport.submit(coroutine)
        self._call = call
        try:
            if self._closed.is_set():
                call.cancel()
            return call.result()
        except concurrent.futures.CancelledError:
            raise _Closed from None
        finally:
            self._call = None

    def _fill(self) -> bool:
        """Put the next items in ``_pending``; False at the end (closed, or not following
        and at the end). Raises a failure once the items before it are out."""
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        try:
            if self._follow:
                self._take(self._next_lines())
            elif self._ended:
                return False
            else:
                self._next_page()
        except _Closed:
            return False
        if not self._pending and self._failure is not None:
            return self._fill()
        return bool(self._pending) or self._follow

    def _next_page(self) -> None:
        params = {"feed": "normal", "limit": str(MAX_LIMIT), **self._where()}
        raw = self._wait(self._transport.request("GET", "/v1/changes", params))
        parsed = parse_results(raw)
        if parsed is None:
            raise RemoteProtocolError(self._transport.url, "not a /v1/changes answer")
        batch, pending = parsed
        self._consumer = None
        if batch or str(batch.token) != self._received:
            self._pending.append(batch)
        self._ended = pending == 0 or (not batch and str(batch.token) == self._received)
        self._received = str(batch.token)

    def _where(self) -> dict[str, str]:
        if self._consumer is not None:
            return {"consumer": self._consumer}
        return {"since": self._received}

    def _next_lines(self) -> list[bytes]:
        """The next lines of the followed feed, reconnecting with backoff as needed."""
        options = self._transport.options
        delay_ms, failing_since = options.retry_first_ms, None
        while True:
            try:
                if self._stream is None:
                    params = {
                        "feed": "continuous",
                        "heartbeat": str(options.heartbeat_ms),
                        **self._where(),
                    }
                    if self._resolved_ms is not None:
                        params["resolved"] = str(self._resolved_ms)
                    self._stream = self._wait(self._transport.open_stream("/v1/changes", params))
                    self._consumer = None  # the server checked it; go on from tokens
                lines = self._wait(self._transport.read_lines(self._stream))
                if lines is None:
                    raise RemoteUnavailableError(self._transport.url, "the feed ended")
                return lines
            except RemoteUnavailableError as error:
                self._drop_stream()
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if options.retry_for_ms is not None and (
                    (now - failing_since) * 1000 >= options.retry_for_ms
                ):
                    raise
                log.warning(
                    "moonish.remote: %s; reconnecting in %d ms from %s",
                    error,
                    delay_ms,
                    self._received,
                )
                if self._closed.wait(delay_ms / 1000):
                    raise _Closed from None
                delay_ms = min(2 * delay_ms, options.retry_max_ms)
            except MoonishError:
                self._drop_stream()
                raise

    def _drop_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            self._submit_quietly(stream)

    def _take(self, lines: list[bytes]) -> None:
        """Parse lines of the feed into ``_pending`` (rows, markers, positions, an error)."""
        envelopes: list[bytes] = []
        seqs: list[str] = []
        start = self._received

        def flush() -> None:
            nonlocal envelopes, seqs, start
            if envelopes or self._received != start:
                self._pending.append(RemoteBatch(envelopes, seqs, Token.parse(self._received)))
            envelopes, seqs, start = [], [], self._received

        for line in lines:
            if not line:
                continue  # a heartbeat
            row = split_row(line)
            if row is not None:
                seqs.append(row[0])
                envelopes.append(row[1])
                self._received = row[0]
                continue
            try:
                document = orjson.loads(line)
                if "resolved" in document:
                    flush()
                    marker = resolved_of(document)
                    self._pending.append(marker)
                    self._received = start = str(marker.token)
                elif "last_seq" in document:
                    self._received = str(Token.parse(str(document["last_seq"])))
                elif "error" in document:
                    error = error_from_body(self._transport.url, 200, document)
                    flush()
                    self._drop_stream()
                    if not isinstance(error, RemoteUnavailableError):  # else: reconnect
                        self._failure = error
                    return
                else:
                    raise TypeError("an unknown line")
            except (orjson.JSONDecodeError, KeyError, TypeError, InvalidArgumentError) as error:
                self._drop_stream()
                raise RemoteProtocolError(
                    self._transport.url, f"cannot read a feed line ({error}): {line[:80]!r}"
                ) from None
        flush()
