"""How a client reaches a server: its base URL, the bearer token, TLS, timeouts, retries."""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from moonish.errors import InvalidArgumentError

if TYPE_CHECKING:  # ssl is imported once a client makes a connection (a local read needs none)
    import ssl

SCHEMES = ("http", "https")


def is_url(text: str | os.PathLike[str]) -> bool:
    """Whether ``text`` names a server (``http://`` or ``https://``) rather than a path."""
    return isinstance(text, str) and text.lower().startswith(("http://", "https://"))


def base_url(url: str) -> str:
    """The server's base URL: scheme, host, port and any prefix a proxy adds, without a
    trailing ``/``, ``/v1`` or ``/v1/changes`` (``http://127.0.0.1:8470/v1/changes`` and
    ``http://127.0.0.1:8470/`` both name ``http://127.0.0.1:8470``).

    Raises:
        InvalidArgumentError: not a URL (``http://[::1``), not http(s), no host, or a query,
            fragment or user name (a token goes in ``token``, never in the URL).
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError as error:  # an unclosed IPv6 bracket: "http://[::1"
        raise InvalidArgumentError(f"bad server URL {url!r}: {error}") from None
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        raise InvalidArgumentError(f"a server URL is http(s)://host[:port][/prefix], got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidArgumentError(
            f"a server URL has no query, fragment or credentials (give the token apart): {url!r}"
        )
    try:
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as error:
        raise InvalidArgumentError(f"bad port in {url!r}: {error}") from None
    path = parts.path.rstrip("/")
    for suffix in ("/v1/changes", "/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return urllib.parse.urlunsplit((parts.scheme.lower(), parts.netloc, path, "", ""))


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The bearer token in ``path``: its first line, surrounding white space removed.

    Raises:
        InvalidArgumentError: the file cannot be read, or its first line is empty.
    """
    try:
        with open(path, encoding="utf-8") as file:
            token = file.readline().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidArgumentError(f"cannot read the token file: {error}", path=path) from None
    if not token:
        raise InvalidArgumentError("the token file's first line is empty", path=path)
    return token


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """Options of :func:`moonish.remote.connect`.

    Attributes:
        cafile: PEM certificates to trust for ``https`` (a self-signed server's certificate);
            ``None``: the system's.
        cadata: the same as PEM text instead of a file (with or instead of ``cafile``): what
            a process that has no copy of the file is handed (the Spark data source's
            executors, moonish.spark.urlsource).
        verify_tls: check the server's certificate and name (turn off only for tests).
        connect_timeout_ms: longest wait for a connection.
        request_timeout_ms: longest wait for a whole answer that is not a feed.
        heartbeat_ms: a followed feed asks the server for a heartbeat this often when idle;
            a feed silent for three heartbeats is taken as dropped and reopened.
        retry_first_ms, retry_max_ms: a followed feed that lost its server waits this long
            before its first reconnect, doubling up to ``retry_max_ms``.
        retry_for_ms: give up (``RemoteUnavailableError``) after failing to reconnect for this
            long; ``None``: never.
    """

    cafile: str | None = None
    cadata: str | None = None
    verify_tls: bool = True
    connect_timeout_ms: int = 10_000
    request_timeout_ms: int = 60_000
    heartbeat_ms: int = 5_000
    retry_first_ms: int = 100
    retry_max_ms: int = 5_000
    retry_for_ms: int | None = 120_000

    def __post_init__(self) -> None:
        for name in (
            "connect_timeout_ms",
            "request_timeout_ms",
            "heartbeat_ms",
            "retry_first_ms",
            "retry_max_ms",
        ):
            if getattr(self, name) <= 0:
                raise InvalidArgumentError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.heartbeat_ms < 10:
            raise InvalidArgumentError(f"heartbeat_ms is at least 10, got {self.heartbeat_ms}")
        if self.retry_for_ms is not None and self.retry_for_ms < 0:
            raise InvalidArgumentError(f"retry_for_ms must be >= 0, got {self.retry_for_ms}")

    def ssl_context(self) -> ssl.SSLContext | bool:
        """What the HTTP client is given for ``https``: a context trusting ``cafile`` and
        ``cadata`` (or the system's certificates), or ``False`` when ``verify_tls`` is off.

        Raises:
            InvalidArgumentError: ``cafile`` or ``cadata`` does not load.
        """
        import ssl

        if not self.verify_tls:
            return False
        try:
            context = ssl.create_default_context(cafile=self.cafile, cadata=self.cadata)
        except (OSError, ssl.SSLError, ValueError) as error:
            raise InvalidArgumentError(
                f"cannot load the CA file: {error}", path=self.cafile
            ) from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context
