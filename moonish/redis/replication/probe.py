"""How far a master's stream has gone: ``INFO replication`` asked on a side connection, apart
from the replication link (whose offsets say only what was received).

The exchange (RESP2, replies parsed with hiredis)::

    -> AUTH [<user>] <password>     <- +OK          (when the URL has credentials)
    -> INFO replication             <- $<length> CRLF <"field:value" CRLF lines> CRLF

Fields read (Redis 7.0 ``server.c`` ``genRedisInfoString``, section ``replication``):
``master_replid`` and ``master_repl_offset`` (the offset of the last byte of the master's
stream; a replica of another master reports the offset it has received), ``master_replid2`` and
``second_repl_offset`` (the replication ID before the last failover, and the first offset that
is not of it: offsets go on across a failover, PSYNC2). The user needs ``+info`` besides
``+psync +replconf +ping``.

Example::

    with MasterProbe("redis://127.0.0.1:6379") as probe:
        stream = probe.ask()          # MasterStream(replid, offset, replid2, second_offset)
"""

from __future__ import annotations

from types import TracebackType
from typing import NamedTuple

import hiredis

from moonish.redis.replication.messages import (
    AUTH_CODES,
    ReplicaOptions,
    ReplicationAuthError,
    ReplicationRefusedError,
    parse_redis_url,
)
from moonish.redis.replication.resp import ReplicationProtocolError, encode_command
from moonish.redis.replication.wire import READ_BYTES, Wire, dial


class MasterStream(NamedTuple):
    """Where a master's replication stream stands (``INFO replication``).

    Attributes:
        replid: ``master_replid``: the stream's replication ID.
        offset: ``master_repl_offset``: bytes of the stream so far.
        replid2: ``master_replid2``: the ID before the last failover (40 zeros: none).
        second_offset: ``second_repl_offset``: offsets below it also belong to ``replid2``
            (-1: none).
    """

    replid: str
    offset: int
    replid2: str
    second_offset: int

    def follows(self, replid: str) -> bool:
        """Whether offsets of a stream under ``replid`` can be compared with :attr:`offset`:
        ``replid`` is this stream's ID, or the one it continued after a failover."""
        return bool(replid) and replid in (self.replid, self.replid2)


def info_fields(text: str) -> dict[str, str]:
    """The ``name:value`` lines of an ``INFO`` (or ``CLUSTER INFO``) reply."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon and not name.startswith("#"):
            fields[name.strip()] = value.strip()
    return fields


def parse_replication_info(text: bytes, path: str) -> MasterStream:
    """The :class:`MasterStream` of an ``INFO replication`` reply's text.

    Raises:
        ReplicationProtocolError: a field is missing or not a number (``path``: the master).
    """
    fields = info_fields(text.decode(errors="replace"))
    try:
        return MasterStream(
            fields["master_replid"],
            int(fields["master_repl_offset"]),
            fields.get("master_replid2", "0" * 40),
            int(fields.get("second_repl_offset", "-1")),
        )
    except (KeyError, ValueError):
        raise ReplicationProtocolError(
            f"INFO replication without master_replid and master_repl_offset: {text[:200]!r}",
            path=path,
        ) from None


def read_reply(wire: Wire, step: str) -> object:
    """One RESP2 reply from ``wire`` (hiredis's Python values), the reply to ``step`` (named in
    errors with the server's address).

    Raises:
        UnavailableError: the connection failed or stayed silent (``Wire.recv``).
        ReplicationAuthError: an ``AUTH`` refused, or a permission error (``-NOPERM``, ...).
        ReplicationRefusedError: another error reply.
        ReplicationProtocolError: bytes that are not RESP.
    """
    return read_replies(wire, step, 1)[0]


def read_replies(wire: Wire, step: str, count: int) -> list[object]:
    """``count`` RESP2 replies from ``wire``, in order (the replies to a pipeline whose first
    command is ``step``); raises as :func:`read_reply` at the first error reply."""
    reader = hiredis.Reader()
    replies: list[object] = []
    try:
        while len(replies) < count:
            reply = reader.gets()
            if reply is False:
                reader.feed(wire.recv(READ_BYTES, f"waiting for the reply to {step}"))
                continue
            if isinstance(reply, hiredis.ReplyError):
                text = str(reply)
                code = text.split(" ", 1)[0]
                if step == "AUTH" or code in AUTH_CODES:
                    raise ReplicationAuthError(f"Redis refused {step}", reply=text, path=wire.path)
                raise ReplicationRefusedError(f"Redis refused {step}", reply=text, path=wire.path)
            replies.append(reply)
    except hiredis.ProtocolError as exc:
        raise ReplicationProtocolError(
            f"a reply to {step} that is not RESP: {exc}", path=wire.path
        ) from None
    return replies


class MasterProbe:
    """A side connection to a master that answers :meth:`ask`; it connects on the first ask
    and again after a failure. Not thread-safe: one thread asks.

    Args:
        url: the master's URL, as the replication link's (``redis[s]://...``).
        options: the link's options (``connect_timeout_ms``, TLS files).
        timeout_ms: how long one answer may take.

    Raises:
        InvalidArgumentError: a bad URL.
    """

    def __init__(
        self, url: str, options: ReplicaOptions | None = None, timeout_ms: int = 5_000
    ) -> None:
        self.address = parse_redis_url(url)
        self.path = self.address.path
        self._options = options or ReplicaOptions()
        self._timeout_ms = timeout_ms
        self._wire: Wire | None = None

    def ask(self) -> MasterStream:
        """``INFO replication`` now.

        Raises:
            UnavailableError: the master cannot be reached or did not answer in time (the
                next ask connects again).
            ReplicationAuthError: the credentials are refused, or the user may not run
                ``INFO`` (``+info``).
            ReplicationRefusedError: another error reply (``INFO`` renamed).
            ReplicationProtocolError: the reply is not ``INFO replication``'s.
        """
        text = self.command(b"INFO", b"replication")
        if not isinstance(text, bytes):
            raise ReplicationProtocolError(
                f"INFO replied {text!r}, not a bulk string", path=self.path
            )
        return parse_replication_info(text, self.path)

    def command(self, *argv: bytes) -> object:
        """Send one command and return its reply (hiredis's values: bytes, int, list, ...).

        Raises:
            UnavailableError: the node cannot be reached or did not answer in time (the next
                command connects again).
            ReplicationAuthError: the credentials are refused, or a permission error.
            ReplicationRefusedError: another error reply (the command's name in the error).
            ReplicationProtocolError: a reply that is not RESP.
        """
        step = b" ".join(argv[:2]).decode(errors="replace")
        try:
            wire = self._wire or self._connect()
            wire.send(encode_command(*argv))
            return self._reply(wire, step)
        except ReplicationRefusedError:
            raise  # an error reply: the connection stays usable
        except BaseException:
            self.close()
            raise

    def pipeline(self, commands: list[tuple[bytes, ...]]) -> list[object]:
        """Send ``commands`` at once and return their replies, in order (one round trip).

        Raises:
            As :meth:`command`; after an error reply the connection is closed (the replies
            after it were not read).
        """
        if not commands:
            return []
        step = b" ".join(commands[0][:2]).decode(errors="replace")
        try:
            wire = self._wire or self._connect()
            wire.send(b"".join(encode_command(*argv) for argv in commands))
            return read_replies(wire, step, len(commands))
        except BaseException:
            self.close()
            raise

    def _connect(self) -> Wire:
        address = self.address
        sock = dial(address, self._options)
        wire = Wire(sock, self.path, self._timeout_ms)
        if address.password is not None:
            user = () if address.username is None else (address.username.encode(),)
            wire.send(encode_command(b"AUTH", *user, address.password.encode()))
            self._reply(wire, "AUTH")
        self._wire = wire
        return wire

    def _reply(self, wire: Wire, step: str) -> object:
        return read_reply(wire, step)

    def close(self) -> None:
        """Close the side connection (the next :meth:`ask` opens another); idempotent."""
        if self._wire is not None:
            wire, self._wire = self._wire, None
            wire.close()

    def __enter__(self) -> MasterProbe:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
