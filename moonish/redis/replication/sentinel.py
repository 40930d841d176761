"""Redis Sentinel: which node is a monitored master now.

A Sentinel URL names sentinels and a master name::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/<master-name>
    rediss+sentinel://...                 (TLS, to the sentinels and to the master)

(port 26379 by default; the credentials are the master's: sentinels are asked without ``AUTH``).
The exchange, per sentinel in the order given until one answers (RESP2, Redis's
``sentinel.c`` ``SENTINEL GET-MASTER-ADDR-BY-NAME``)::

    -> SENTINEL GET-MASTER-ADDR-BY-NAME <name>   <- *2 <host> <port>  (or a null: unknown name)

then, on the node it names (a sentinel may lag a failover)::

    -> AUTH [<user>] <password>                  <- +OK   (when the URL has credentials)
    -> ROLE                                      <- *3 "master" <offset> <replicas>

A node that answers ``ROLE`` with anything but ``master`` is passed over for the next sentinel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from moonish.errors import InvalidArgumentError, MoonishError, UnavailableError
from moonish.redis.replication.messages import RedisAddress, ReplicaOptions
from moonish.redis.replication.probe import read_reply
from moonish.redis.replication.resp import encode_command
from moonish.redis.replication.wire import Wire, dial

SCHEMES = ("redis+sentinel", "rediss+sentinel")
DEFAULT_SENTINEL_PORT = 26379
_URL = re.compile(
    r"(?P<scheme>[a-z+]+)://(?:(?P<auth>[^@/]*)@)?(?P<hosts>[^/?#]+)/(?P<name>[^/?#]+)"
)


@dataclass(frozen=True, slots=True)
class SentinelAddress:
    """A parsed Sentinel URL.

    Attributes:
        sentinels: ``(host, port)`` of each sentinel, in the order to ask them.
        master_name: the monitored master's name.
        username, password: the master's credentials (``None``: none).
        tls: ``rediss+sentinel``: TLS to the sentinels and the master.
    """

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    username: str | None
    password: str | None = field(repr=False)
    tls: bool = False

    @property
    def path(self) -> str:
        """The URL without credentials: how errors, ``source.json`` and reports name it."""
        hosts = ",".join(f"{_host(host)}:{port}" for host, port in self.sentinels)
        scheme = SCHEMES[1] if self.tls else SCHEMES[0]
        return f"{scheme}://{hosts}/{self.master_name}"

    def master_url(self, host: str, port: int) -> str:
        """The ``redis[s]://`` URL of the node ``host:port`` with this URL's credentials."""
        auth = ""
        if self.password is not None:
            user = quote(self.username, safe="") if self.username else ""
            auth = f"{user}:{quote(self.password, safe='')}@"
        return f"redis{'s' if self.tls else ''}://{auth}{_host(host)}:{port}"


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` is a Sentinel URL (its scheme)."""
    return url.split("://", 1)[0] in SCHEMES


def parse_sentinel_url(url: str) -> SentinelAddress:
    """Parse a Sentinel URL (module docstring).

    Raises:
        InvalidArgumentError: another scheme, no sentinel or master name, a bad port, a user
            without a password, a query or fragment.
    """
    shown = re.sub(r"//[^@/]*@", "//***@", url)
    match = _URL.fullmatch(url)
    if match is None or match["scheme"] not in SCHEMES:
        raise InvalidArgumentError(
            f"not a Sentinel URL (redis+sentinel://host[:port][,host[:port]...]/<master-name>): "
            f"{shown}"
        )
    sentinels = []
    for part in match["hosts"].split(","):
        if part.startswith("["):  # [IPv6]:port
            host, _, rest = part[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else rest or str(DEFAULT_SENTINEL_PORT)
        else:
            host, colon, port = part.rpartition(":")
            if not colon:
                host, port = part, str(DEFAULT_SENTINEL_PORT)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError(f"bad sentinel address {part!r} in {shown}")
        sentinels.append((host, int(port)))
    username = password = None
    if match["auth"] is not None:
        user, colon, secret = match["auth"].partition(":")
        if not colon:
            raise InvalidArgumentError(
                f"a user without a password in {shown} (redis+sentinel://user:password@...)"
            )
        username, password = (unquote(user) or None), unquote(secret)
    return SentinelAddress(
        tuple(sentinels),
        unquote(match["name"]),
        username,
        password,
        match["scheme"] == SCHEMES[1],
    )


def find_master(
    address: SentinelAddress, options: ReplicaOptions, timeout_ms: int = 5_000
) -> tuple[str, int]:
    """The ``(host, port)`` of the master the sentinels name now, checked with ``ROLE``.

    Raises:
        InvalidArgumentError: every sentinel that answered says it monitors no master of
            that name.
        UnavailableError: no sentinel answered with a node that says it is a master (each
            one's reason in the message; ``path``: the Sentinel URL without credentials).
    """
    reasons: list[str] = []
    unknown = 0
    name = address.master_name.encode()
    for host, port in address.sentinels:
        where = f"sentinel {_host(host)}:{port}"
        try:
            reply = _ask(
                RedisAddress(host, port, None, None, address.tls),
                options,
                timeout_ms,
                [b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", name],
            )
        except MoonishError as exc:
            reasons.append(f"{where}: {exc}")
            continue
        if reply is None:
            unknown += 1
            reasons.append(f"{where}: no master named {address.master_name!r}")
            continue
        if not (isinstance(reply, list) and len(reply) == 2):
            reasons.append(f"{where}: answered {reply!r}")
            continue
        master = (reply[0].decode(errors="replace"), int(reply[1]))
        try:
            role = _ask(
                RedisAddress(master[0], master[1], address.username, address.password, address.tls),
                options,
                timeout_ms,
                [b"ROLE"],
            )
        except MoonishError as exc:
            reasons.append(f"{where} named {_host(master[0])}:{master[1]}: {exc}")
            continue
        if isinstance(role, list) and role and role[0] == b"master":
            return master
        shown_role = role[0].decode(errors="replace") if isinstance(role, list) and role else role
        reasons.append(f"{where} named {_host(master[0])}:{master[1]}, which is a {shown_role}")
    if unknown and unknown == len(reasons):
        raise InvalidArgumentError(
            f"no sentinel monitors a master named {address.master_name!r} ({'; '.join(reasons)})",
            path=address.path,
        )
    raise UnavailableError(
        f"no sentinel named a master that answers as one: {'; '.join(reasons)}", path=address.path
    )


def _ask(
    address: RedisAddress, options: ReplicaOptions, timeout_ms: int, command: list[bytes]
) -> object:
    """One command's reply on a new connection (after ``AUTH`` when ``address`` has
    credentials), closed after."""
    wire = Wire(dial(address, options), address.path, timeout_ms)
    try:
        if address.password is not None:
            user = () if address.username is None else (address.username.encode(),)
            wire.send(encode_command(b"AUTH", *user, address.password.encode()))
            read_reply(wire, "AUTH")
        wire.send(encode_command(*command))
        return read_reply(wire, " ".join(part.decode() for part in command[:2]))
    finally:
        wire.close()


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
