"""What a ``moonish serve`` server is told: where to listen, who may ask, and its limits.

Security (docs/server.md, "Security"): the server listens on 127.0.0.1 by default. Any
other address needs a bearer token (``token``, from ``--token-file``): then every request,
whatever its path, must carry ``Authorization: Bearer <token>`` (or, for a browser's
``EventSource``, which cannot set headers, ``?access_token=<token>``) or gets 401 and
nothing else. TLS is on when ``tls_cert`` and ``tls_key`` are given.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import dataclass, field

from moonish.errors import InvalidArgumentError
from moonish.keypatterns import KeyPatterns

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8470
MIN_TOKEN_CHARS = 16

HISTORY_MS = 3_600_000
"""How far back the status page's charts go: the samples the server keeps (one hour)."""

DEFAULT_LINGER_MS = 2.0
"""The shared reader's linger (``ServeOptions.linger_ms``): docs/benchmarks.md §9."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one server allows; past a limit a request gets 429 (or a WebSocket a close code).

    Attributes:
        max_subscribers: open feeds at once (longpoll, continuous, eventsource, WebSocket);
            one more is refused with 429 ``too_many_requests``.
        max_request_bytes: largest request body and WebSocket message (413 / close 1009).
        max_line_bytes: largest request line and header field (aiohttp refuses longer: 400).
        idle_timeout_ms: a kept-alive connection without a request is closed after this; a
            WebSocket whose peer answers no ping for this long is closed.
        max_timeout_ms: the largest ``timeout`` a feed may ask for (larger values are cut).
        default_timeout_ms: a feed's ``timeout`` when it gives none (CouchDB's 60 s).
        min_heartbeat_ms: the smallest ``heartbeat`` (and ``resolved``) interval accepted.
        ring_bytes: memory for the shared ring of recent envelopes (and their framing).
        batch_bytes: most bytes written to one subscriber at a time (its bounded queue).
        max_credit: most rows a WebSocket client may have granted and not yet received.
    """

    max_subscribers: int = 4096
    max_request_bytes: int = 64 * 1024
    max_line_bytes: int = 16 * 1024
    idle_timeout_ms: int = 75_000
    max_timeout_ms: int = 24 * 3600 * 1000
    default_timeout_ms: int = 60_000
    min_heartbeat_ms: int = 10
    ring_bytes: int = 64 * 1024 * 1024
    batch_bytes: int = 1024 * 1024
    max_credit: int = 1_000_000

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) <= 0:
                raise InvalidArgumentError(f"limit {name} must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How to serve one data directory.

    Attributes:
        host: address to listen on (default 127.0.0.1; anything but a loopback address
            needs ``token``).
        port: TCP port (0: any free port; the server's ``url`` says which).
        token: the bearer token every request must carry, or ``None`` (loopback only).
        tls_cert, tls_key: PEM files; both or neither.
        limits: see :class:`Limits`.
        resolved_ms: how often the shared reader computes resolved watermarks (ms); a
            feed's ``resolved`` interval is rounded up to it.
        fallback_poll_ms: the shared reader's longest wait without a file-system event.
        linger_ms: while changes keep coming, the shared reader reads at most this often
            (ms), so each round carries more changes to every subscriber in fewer writes;
            the first change after a quiet spell is read at once (docs/server.md,
            "Fan-out"). 0: read again as soon as a round is out.
        messages: also serve checkpoints and message records (``op: "m"``) in every feed;
            without it they are passed over (tokens still move past them), as every reader
            leaves them out unless asked (docs/envelopes.md).
        include_keys, exclude_keys: Redis glob patterns (moonish.keypatterns) applied to
            every feed of the server: only the changes of keys matching one of
            ``include_keys`` (all when empty) and none of ``exclude_keys`` are sent, the
            others passed over like a request's filters (the token still moves); a request's
            own ``include_keys``/``exclude_keys`` are ANDed with them.
        history_interval_ms: how often the server samples its figures for the status page's
            charts (events/s, seconds behind the source); it keeps the last hour of samples
            (moonish.serve.history).

    Raises:
        InvalidArgumentError: a port outside 0..65535; one TLS file without the other; a
            token shorter than 16 characters; a host other than loopback without a token; a
            key pattern moonish.keypatterns refuses; an interval out of range.
    """

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = field(default=None, repr=False)
    tls_cert: str | None = None
    tls_key: str | None = None
    limits: Limits = field(default_factory=Limits)
    resolved_ms: int = 100
    fallback_poll_ms: int = 1000
    linger_ms: float = DEFAULT_LINGER_MS
    messages: bool = False
    include_keys: tuple[str, ...] = ()
    exclude_keys: tuple[str, ...] = ()
    history_interval_ms: int = 10_000

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise InvalidArgumentError(f"port must be 0..65535, got {self.port}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidArgumentError("TLS needs both a certificate and a key file")
        if self.token is not None and len(self.token) < MIN_TOKEN_CHARS:
            raise InvalidArgumentError(
                f"the bearer token must have at least {MIN_TOKEN_CHARS} characters"
            )
        if self.token is None and not is_loopback(self.host):
            raise InvalidArgumentError(
                f"listening on {self.host} (not a loopback address) needs a bearer token: "
                "give --token-file"
            )
        if self.resolved_ms <= 0 or self.fallback_poll_ms <= 0:
            raise InvalidArgumentError("resolved_ms and fallback_poll_ms must be > 0")
        if not 0 <= self.linger_ms <= 1000:
            raise InvalidArgumentError(f"linger_ms must be 0..1000, got {self.linger_ms}")
        KeyPatterns([*self.include_keys, *self.exclude_keys])  # (refuses a bad pattern)
        if not 0 < self.history_interval_ms <= HISTORY_MS:
            raise InvalidArgumentError(
                f"history_interval_ms must be 1..{HISTORY_MS}, got {self.history_interval_ms}"
            )

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert is not None else "http"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context (TLS 1.2 or later), or ``None`` without TLS.

        Raises:
            InvalidArgumentError: a certificate or key file that cannot be loaded.
        """
        if self.tls_cert is None or self.tls_key is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as error:
            raise InvalidArgumentError(
                f"cannot load the TLS certificate and key: {error}", path=self.tls_cert
            ) from None
        return context


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_token(path: str | os.PathLike[str]) -> str:
    """The bearer token in ``path``: its first line, surrounding white space removed.

    Raises:
        InvalidArgumentError: the file cannot be read, is empty, or the token is shorter
            than 16 characters or holds characters other than printable ASCII.
    """
    try:
        with open(path, encoding="ascii") as handle:
            token = handle.readline().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidArgumentError(f"cannot read the token file: {error}", path=path) from None
    if len(token) < MIN_TOKEN_CHARS or not all(33 <= ord(c) < 127 for c in token):
        raise InvalidArgumentError(
            f"the token file must hold a token of at least {MIN_TOKEN_CHARS} printable ASCII "
            "characters without spaces",
            path=path,
        )
    return token
