"""What a replica connection is given and gives back: the Redis URL, options, the answers to
``PSYNC``, and the errors a master's replies map to (moonish.redis.replication.connection uses
them).

Error replies (Redis 7.0 ``replication.c`` ``syncWithMaster`` and
``slaveTryPartialResynchronization``; ``server.c`` ``processCommand``): ``-NOAUTH``,
``-WRONGPASS``, ``-NOPERM`` (and the old ``-ERR operation not permitted``) are credentials or
ACL permissions: :class:`ReplicationAuthError`. ``-LOADING``, ``-MASTERDOWN``,
``-NOMASTERLINK``, ``-BUSY``, ``-TRYAGAIN`` pass: :class:`ReplicationUnavailableError`. Any
other error (``PSYNC`` unknown or renamed) is :class:`ReplicationRefusedError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO
from urllib.parse import quote, unquote, urlsplit

from moonish.errors import (
    InvalidArgumentError,
    MoonishError,
    UnavailableError,
    UnsupportedFormatError,
)

DEFAULT_PORT = 6379
REPLID = re.compile(r"[0-9a-f]{40}")
AUTH_CODES = ("NOAUTH", "NOPERM", "WRONGPASS")
VALKEY_REPLICA_VERSION = b"9.0.0"
"""The version moonish announces to a Valkey master (``REPLCONF version``): the newest whose
formats it reads. Valkey 9 sends a ``VALKEY080`` full sync only to a replica of version 9 or
above, ``REDIS0011`` (no hash field TTLs) otherwise (checked on Valkey 9.1.2)."""
_VALKEY_VERSION = re.compile(rb"^valkey_version:([0-9.]+)\r?$", re.MULTILINE)
_SERVER_MODE = re.compile(rb"^(?:redis_mode|server_mode):([a-z]+)\r?$", re.MULTILINE)
_TRY_LATER_CODES = ("LOADING", "MASTERDOWN", "NOMASTERLINK", "BUSY", "TRYAGAIN")


class _Reply:
    """An error that quotes Redis's error reply: ``reply`` (without the ``-``) and the
    master's address in ``path``."""

    reply: str

    def __init__(self, message: str, *, reply: str, path: str) -> None:
        self.reply = reply
        super().__init__(f"{message}: {reply}", path=path)  # type: ignore[call-arg]


class ReplicationAuthError(_Reply, InvalidArgumentError):
    """Redis refused the credentials or the user's ACL permissions (``-WRONGPASS``,
    ``-NOAUTH``, ``-NOPERM``). A replica user needs ``+psync +replconf +ping``.

    Attributes:
        reply: Redis's error reply (without the ``-``).
        path: the master's address.
    """


class ReplicationRefusedError(_Reply, InvalidArgumentError):
    """Redis answered the handshake with an error that retrying will not change (``PSYNC``
    unknown or renamed, as managed services do: use the AOF path instead).

    Attributes:
        reply, path: as :class:`ReplicationAuthError`.
    """


class ReplicationUnavailableError(_Reply, UnavailableError):
    """Redis cannot serve a replica now (``-LOADING``, ``-MASTERDOWN``, ``-NOMASTERLINK``,
    ``-BUSY``, or it aborted the transfer); retry later.

    Attributes:
        reply, path: as :class:`ReplicationAuthError`.
    """


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """Where and as whom to connect, from ``redis[s]://[[user]:password@]host[:port][/db]``
    (``tls``: the ``rediss`` scheme)."""

    host: str
    port: int
    username: str | None
    password: str | None = field(repr=False)
    tls: bool = False

    @property
    def path(self) -> str:
        """The address without credentials, as errors name it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"redis{'s' if self.tls else ''}://{host}:{self.port}"


def parse_redis_url(url: str) -> RedisAddress:
    """Parse ``redis://[[user]:password@]host[:port][/db]``, or ``rediss://…`` for TLS (user
    and password percent-decoded; port 6379 by default; a db number is accepted and ignored:
    a replica receives every db).

    Raises:
        InvalidArgumentError: another scheme, a user without a password, no host, a bad port
            or db, a query or fragment.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise InvalidArgumentError(f"not a redis:// or rediss:// URL: {_redact(url)}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise InvalidArgumentError(f"bad port in {_redact(url)}") from None
    if not parts.hostname:
        raise InvalidArgumentError(f"no host in {_redact(url)}")
    if parts.query or parts.fragment:
        raise InvalidArgumentError(f"a query or fragment is not supported: {_redact(url)}")
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        raise InvalidArgumentError(f"bad db number {db!r} in {_redact(url)}")
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if username is not None and password is None:
        raise InvalidArgumentError(
            f"a user without a password in {_redact(url)} (redis://user:password@host)"
        )
    return RedisAddress(parts.hostname, port, username, password, parts.scheme == "rediss")


def with_password(url: str, password: str) -> str:
    """``url`` (``redis[s]://`` or ``redis[s]+sentinel://``) with ``password`` as its
    password (percent-encoded), the user kept: how ``--password-file`` keeps the secret off
    the command line.

    Raises:
        InvalidArgumentError: the URL has a password already, or no ``scheme://``.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise InvalidArgumentError(f"not a URL: {_redact(url)}")
    authority = rest.split("/", 1)[0]
    auth, at, _ = authority.rpartition("@")
    if at and ":" in auth:
        raise InvalidArgumentError(
            f"{_redact(url)} has a password already: give it in one place (the URL or "
            "--password-file)"
        )
    user = auth if at else ""
    hosts = rest[len(auth) + 1 :] if at else rest
    return f"{scheme}://{user}:{quote(password, safe='')}@{hosts}"


def _redact(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", url)


@dataclass(frozen=True, slots=True)
class ReplicaOptions:
    """How the replica connection behaves.

    Attributes:
        connect_timeout_ms: TCP connect timeout.
        timeout_ms: how long any read may wait for a byte from the master before
            :class:`UnavailableError` (Redis's ``repl-timeout``, 60 s; a master
            sends a keep-alive newline every second before the RDB and a ``PING`` every
            ``repl-ping-replica-period``, 10 s, after it).
        ack_interval_ms: how often ``REPLCONF ACK`` is sent while reading the stream
            (Redis's replicas: every second). The master disconnects a replica it has not
            heard from for its ``repl-timeout``.
        listening_port: the port announced by ``REPLCONF listening-port`` (what ``INFO
            replication`` lists for this replica); ``None``: the connection's local port.
        tls_ca_file: for ``rediss://``: the CA certificates (PEM) that sign the master's
            certificate; ``None``: the system's trust store. The certificate must name the
            URL's host.
        tls_cert_file, tls_key_file: for ``rediss://``: this client's certificate and key
            (PEM), which Redis asks for by default (``tls-auth-clients yes``).
        cluster_node: follow a Redis Cluster node alone (the keys of the slots it serves;
            ``--no-cluster``); ``False``: a cluster node is refused
            (:class:`ClusterNodeError`).
    """

    connect_timeout_ms: int = 10_000
    timeout_ms: int = 60_000
    ack_interval_ms: int = 1_000
    listening_port: int | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    cluster_node: bool = False


@dataclass(frozen=True, slots=True)
class FullResync:
    """``+FULLRESYNC``: the master sends its whole dataset as an RDB, then the commands that
    follow ``offset``.

    Attributes:
        replid: the master's replication ID (40 hex characters), to store for ``PSYNC``.
        offset: the replication offset the RDB stands at; the first command starts there.
        payload: the RDB, read from the socket as it arrives (not seekable); read it to its
            end (:class:`moonish.redis.rdb.reader.RdbReader` reads exactly the RDB) before the
            command stream.
        size_bytes: the RDB's length (``$<length>`` framing), or ``None`` (diskless,
            ``$EOF:<mark>`` framing).
        keepalives: keep-alive newlines received before the payload's header.
    """

    replid: str
    offset: int
    payload: BinaryIO
    size_bytes: int | None
    keepalives: int


@dataclass(frozen=True, slots=True)
class Continue:
    """``+CONTINUE``: the master continues the stream right after the offset asked for.

    Attributes:
        replid: the replication ID to store from now on (the new one if the master announced
            one, after a failover).
        offset: the offset asked for: the next command starts there.
        previous_replid: the ID asked for, when the master announced a different one.
    """

    replid: str
    offset: int
    previous_replid: str | None


def valkey_version(info: bytes) -> str | None:
    """The ``valkey_version`` field of an ``INFO server`` reply (Valkey ``server.c``,
    ``genValkeyInfoString``), or ``None``: not Valkey (Redis has no such field)."""
    match = _VALKEY_VERSION.search(info)
    return match.group(1).decode() if match else None


def server_mode(info: bytes) -> str | None:
    """The mode of an ``INFO server`` reply: ``standalone``, ``cluster`` or ``sentinel``
    (Redis ``redis_mode``, Valkey ``server_mode`` too), or ``None``: not named."""
    match = _SERVER_MODE.search(info)
    return match.group(1).decode() if match else None


class ClusterNodeError(UnsupportedFormatError):
    """The node is a Redis Cluster node, and one node of a cluster holds only its own slots'
    keys: refused unless asked for (``ReplicaOptions.cluster_node``, ``--no-cluster``).
    ``path``: the node; ``topology``: the cluster's masters and slots when they could be
    read (moonish.redis.topology), else ``""``."""

    def __init__(self, path: str, topology: str = "") -> None:
        self.topology = topology
        seen = f" (masters: {topology})" if topology else ""
        super().__init__(
            f"this node is part of a Redis Cluster{seen}, and one node holds only the keys "
            "of its own hash slots: capture the whole cluster with moonish wal capture "
            "(moonish.redis.cluster.runner.capture_cluster), or this node alone with "
            "--no-cluster (ReplicaOptions.cluster_node)",
            path=path,
        )


def reply_error(step: str, reply: str, path: str) -> MoonishError:
    """The error for the error reply ``reply`` (with its ``-``) to the handshake's ``step``."""
    text = reply[1:]
    code = text.split(" ", 1)[0]
    if code in AUTH_CODES or text.startswith("ERR operation not permitted") or step == "AUTH":
        return ReplicationAuthError(f"Redis refused {step}", reply=text, path=path)
    if code in _TRY_LATER_CODES:
        return ReplicationUnavailableError(
            f"Redis cannot serve a replica now ({step})", reply=text, path=path
        )
    return ReplicationRefusedError(
        f"Redis refused {step}: a server that renames or forbids PSYNC (as managed services "
        "do) cannot be followed as a replica; import its data instead: moonish wal "
        "import-aof <appendonlydir> (its append-only files) or moonish wal import-rdb "
        "<dump.rdb> (a snapshot, e.g. an exported backup)",
        reply=text,
        path=path,
    )
