"""What every handler of one server shares: the data directory, the ring and its publisher,
the timer, the limits and the count of open feeds; and where a feed starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from aiohttp import web

from moonish.cdc.merged_read import consumer_start, start_token
from moonish.cdc.positions import data_shards, earliest, latest_lsn, now
from moonish.cdc.token import NOW, Token
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.datadir import consumers
from moonish.datadir.consumers import Consumer
from moonish.errors import InvalidArgumentError, PositionNotRetainedError
from moonish.metrics.families import SERVE_SUBSCRIBERS
from moonish.serve.chunks import KeyRule
from moonish.serve.errors import LimitExceededError
from moonish.serve.history import History
from moonish.serve.options import HISTORY_MS, ServeOptions
from moonish.serve.ring import Publisher, Ring, covers
from moonish.serve.timer import Timer


class ServerState:
    """One server's shared state (a :class:`~moonish.serve.subscription.Hub`).

    Attributes:
        data_dir: the data directory served; ``shards``: its shard directories.
        options: what the server was started with.
        ring, publisher: the shared ring and the thread that fills it.
        timer: heartbeats' and timeouts' clock.
        stopping: set when the server stops (open feeds end with ``unavailable``).
        subscribers: open feeds (longpoll, continuous, eventsource, WebSocket).
        resyncs: times a subscriber read the log on its own (behind the ring's start).
        websockets: open WebSockets (closed with 1001 when the server stops).
        keys: the server's own key patterns (``include_keys``/``exclude_keys`` of its
            options), ANDed into every feed's filter; ``None``: none.
        clock: the wall clock of the history's samples.
        history: the status page's last hour of figures (moonish.serve.history), filled by
            the server's sampler.
    """

    def __init__(
        self,
        data_dir: str,
        options: ServeOptions,
        timer: Timer,
        loop: asyncio.AbstractEventLoop,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.data_dir = data_dir
        self.shards = data_shards(data_dir)
        self.options = options
        self.timer = timer
        self.stopping = False
        self.subscribers = 0
        self.resyncs = 0  # times a subscriber fell behind the ring and read the log itself
        self.websockets: set[web.WebSocketResponse] = set()
        self.batch_bytes = options.limits.batch_bytes
        self.messages = options.messages
        self.keys = KeyRule.of(options.include_keys, options.exclude_keys)
        self.ring = Ring(now(self.shards), options.limits.ring_bytes)
        self.clock = clock
        self.history = History(options.history_interval_ms, HISTORY_MS, clock.now_us(), 0)
        self.publisher = Publisher(
            data_dir,
            self.ring,
            loop,
            options.resolved_ms,
            options.fallback_poll_ms,
            options.linger_ms,
            options.messages,
        )

    @contextlib.contextmanager
    def subscriber(self) -> Iterator[None]:
        """Count an open feed for its lifetime.

        Raises:
            LimitExceededError: ``max_subscribers`` feeds are open already.
        """
        limit = self.options.limits.max_subscribers
        if self.subscribers >= limit:
            raise LimitExceededError(
                "max_subscribers", limit, f"the server has {limit} open feeds, its limit"
            )
        self.subscribers += 1
        SERVE_SUBSCRIBERS.inc()
        try:
            yield
        finally:
            self.subscribers -= 1
            SERVE_SUBSCRIBERS.dec()

    def start(self, since: str | None, consumer: str | None) -> tuple[Token, Consumer | None]:
        """Where a feed starts: after ``since`` (a token, ``earliest``, ``now``) or at a named
        consumer's confirmed position. Blocking (reads the log's ends): call in a thread.

        Raises:
            InvalidArgumentError: a malformed token, one of another shard count, a position
                past a shard's end, ``since`` with ``consumer``.
            ConsumerNotFoundError, ConsumerLostError: as ``cdc read --consumer``.
            PositionNotRetainedError: retention removed changes after the position (names
                the oldest available token and how many changes are gone).
        """
        if consumer is not None:
            if since is not None:
                raise InvalidArgumentError("give since or consumer, not both")
            owner, token = consumer_start(self.data_dir, self.shards, consumer)
        else:
            owner, token = None, start_token(self.shards, NOW if since is None else since)
        if not covers(token, self.ring.token):  # the ring's end is a cheap lower bound
            end = now(self.shards)
            for k, (position, last) in enumerate(zip(token.positions, end.positions, strict=True)):
                if position > last:
                    raise InvalidArgumentError(
                        f"position {token} is past the end of shard {k} (its last LSN is "
                        f"{last}): this is not the log the token was read from",
                        path=self.shards[k],
                    )
        oldest = earliest(self.shards)
        for k, (position, first) in enumerate(zip(token.positions, oldest.positions, strict=True)):
            if position < first:
                if owner is not None:
                    raise consumers.lost_error(self.data_dir, owner, k, first + 1, str(oldest))
                gone = sum(
                    max(0, o - p) for o, p in zip(oldest.positions, token.positions, strict=True)
                )
                raise PositionNotRetainedError(
                    f"position {token} is no longer retained: shard {k} starts after LSN "
                    f"{first}; {gone} changes are gone; the oldest available token is {oldest} "
                    "(read from there to go on, accepting the gap)",
                    shard=k,
                    oldest_lsn=first + 1,
                    lsn=position + 1,
                    path=self.shards[k],
                    token=str(token),
                    oldest_token=str(oldest),
                    gone=gone,
                )
        return token, owner

    def pending(self, token: Token) -> int:
        """Records in the log after ``token`` (every LSN, summed over shards). Blocking."""
        return sum(
            max(0, latest_lsn(shard) - position)
            for shard, position in zip(self.shards, token.positions, strict=True)
        )
