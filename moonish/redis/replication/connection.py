"""A Redis replica connection: the handshake, the full resync's RDB, then the command stream with
the replication offset of every command (docs/redis-source.md, "Live capture").

Source: Redis 7.0 ``replication.c``: ``syncWithMaster`` and
``slaveTryPartialResynchronization`` (the handshake), ``readSyncBulkPayload`` (the RDB
transfer), ``replconfCommand`` and ``replicationSendAck`` (acknowledgements). The exchange::

    -> PING                                   <- +PONG  (or -NOAUTH: AUTH comes next)
    -> AUTH [<user>] <password>               <- +OK    (when the URL has credentials)
    -> INFO server                            <- $<n> … valkey_version:9.1.2 …  (or an error;
                                                         redis_mode:cluster: refused unless
                                                         ReplicaOptions.cluster_node)
    -> REPLCONF listening-port <port>         <- +OK
    -> REPLCONF capa eof capa psync2          <- +OK
    -> REPLCONF version 9.0.0                 <- +OK    (only to Valkey: Valkey 9 then sends
                                                         VALKEY080; Valkey ``syncWithPrimary``)
    -> PSYNC <replid> <offset + 1> | PSYNC ? -1
    <- "\\n"* +FULLRESYNC <replid> <offset>  then the RDB payload (wire.py), or
    <- "\\n"* +CONTINUE [<replid>]
    <- the command stream (resp.py); REPLCONF GETACK * asks for an ACK
    -> REPLCONF ACK <offset>                  (no reply; every second, and on GETACK)

Offsets: a replication offset counts the bytes of the master's stream. ``+FULLRESYNC <id> <o>``
means the RDB holds everything up to ``o``: the first command after it starts at ``o``. Every
command is returned as ``(start_offset, end_offset, argv)``; ``end_offset`` is what a replica
that applied it would acknowledge, and ``PSYNC <replid> <end_offset + 1>`` later resumes right
after it. The offset this connection acknowledges is only ever what the caller declared durable
(:meth:`ReplicaConnection.ack`), never merely what was received.

Example::

    with ReplicaConnection("redis://capture:secret@127.0.0.1:6379") as link:
        sync = link.psync()                      # or link.psync(replid, applied_offset)
        if isinstance(sync, FullResync):
            for item in RdbReader(sync.payload, link.path):
                ...                              # load the keyspace
            link.ack(sync.offset)                # once it is durable
        while True:
            for start, end, argv in link.read_batch(max_wait_ms=100):
                ...                              # apply; when durable: link.ack(end)
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import BinaryIO

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import InvalidArgumentError
from moonish.redis.replication.messages import (
    AUTH_CODES,
    REPLID,
    VALKEY_REPLICA_VERSION,
    ClusterNodeError,
    Continue,
    FullResync,
    RedisAddress,
    ReplicaOptions,
    ReplicationAuthError,
    ReplicationRefusedError,
    ReplicationUnavailableError,
    parse_redis_url,
    reply_error,
    server_mode,
    valkey_version,
)
from moonish.redis.replication.resp import (
    CommandSplitter,
    ReplCommand,
    ReplicationProtocolError,
    encode_command,
)
from moonish.redis.replication.wire import (
    MARK_BYTES,
    READ_BYTES,
    MarkedPayload,
    SizedPayload,
    Wire,
    buffered,
    dial,
)

RESTART_ACK_MS = 100
"""After a diskless RDB, the ACK is repeated after this much silence until commands arrive (a
master notices its fork ended within 100 ms, ``serverCron`` at ``hz 10``)."""

__all__ = [
    "Continue",
    "FullResync",
    "RedisAddress",
    "ReplCommand",
    "ReplicaConnection",
    "ReplicaOptions",
    "ReplicationAuthError",
    "ReplicationProtocolError",
    "ReplicationRefusedError",
    "ReplicationUnavailableError",
    "parse_redis_url",
]


class ReplicaConnection:
    """One replication link to a Redis master: :meth:`psync` once, then the command stream.

    Reads happen in the calling thread (:meth:`read_batch`); :meth:`ack` only records an
    offset and may be called from any thread. Not reusable: after a disconnect
    (:class:`UnavailableError`), open a new connection and ``psync`` from the last offset
    made durable.

    Args:
        url: ``redis[s]://[[user]:password@]host[:port][/db]`` (:func:`parse_redis_url`).
        options: timeouts, ACK period, announced port.
        clock: times the ACK period and the master's silence.

    Raises:
        InvalidArgumentError: a bad URL, or TLS files with a ``redis://`` URL.
    """

    def __init__(
        self, url: str, options: ReplicaOptions | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.address = parse_redis_url(url)
        self.path = self.address.path
        self._options = options = options or ReplicaOptions()
        if not self.address.tls and (options.tls_ca_file or options.tls_cert_file):
            raise InvalidArgumentError("TLS files given for a redis:// URL (use rediss://)")
        self._clock = clock
        self._wire: Wire | None = None
        self._payload: SizedPayload | MarkedPayload | None = None
        self._payload_file: BinaryIO | None = None
        self._splitter: CommandSplitter | None = None
        self.replid: str | None = None
        """The master's replication ID once :meth:`psync` returned."""
        self.valkey_version: str | None = None
        """The master's ``valkey_version`` (``INFO server``) once :meth:`psync` returned, or
        ``None``: Redis, or an ``INFO`` the user may not run."""
        self.cluster_mode = False
        """Whether the node said it runs in cluster mode (``INFO server`` ``redis_mode``)."""
        self._durable = 0
        self._acked = -1
        self._ack_due_us = 0
        self._getack_offset = -1  # where the last REPLCONF GETACK started
        self._offset = 0
        self._last_io_us = 0
        self._awaiting_stream_ms: int | None = None  # silence waited since a diskless RDB

    # -- the handshake -------------------------------------------------------------------

    def psync(
        self, replid: str | None = None, after_offset: int | None = None
    ) -> FullResync | Continue:
        """Connect, authenticate, announce the replica and ask for the stream after
        ``after_offset`` of ``replid`` (``PSYNC replid after_offset+1``), or for everything
        (``PSYNC ? -1``) when both are ``None``.

        Returns:
            :class:`FullResync` (read its payload, then the commands) or :class:`Continue`.

        Raises:
            InvalidArgumentError: a bad ``replid`` or ``after_offset``, or a second call.
            ReplicationAuthError: AUTH failed, or the user may not replicate.
            ReplicationRefusedError: Redis refuses replication for another reason.
            ReplicationUnavailableError: Redis cannot serve a replica now (loading, ...).
            UnavailableError: the connection failed or timed out.
            ReplicationProtocolError: the peer does not speak Redis's protocol.
            ClusterNodeError: a Redis Cluster node, without ``options.cluster_node``.
        """
        if self._wire is not None:
            raise InvalidArgumentError("psync was called already: open a new connection")
        if (replid is None) != (after_offset is None):
            raise InvalidArgumentError("pass both replid and after_offset, or neither")
        if replid is not None and not REPLID.fullmatch(replid):
            raise InvalidArgumentError(f"a replication ID is 40 hex characters, not {replid!r}")
        if after_offset is not None and after_offset < 0:
            raise InvalidArgumentError(f"after_offset {after_offset} is negative")
        wire = self._wire = self._connect()
        self._handshake(wire)
        if self.cluster_mode and not self._options.cluster_node:
            raise ClusterNodeError(self.path)
        if replid is None or after_offset is None:
            wire.send(encode_command(b"PSYNC", b"?", b"-1"))
        else:
            wire.send(encode_command(b"PSYNC", replid.encode(), b"%d" % (after_offset + 1)))
        line = self._reply(wire, "PSYNC")
        while not line:  # newlines before the reply keep the link alive
            line = self._reply(wire, "PSYNC")
        if line.startswith("-"):
            raise reply_error("PSYNC", line, self.path)
        words = line.split(" ")
        if words[0] == "+CONTINUE" and replid is not None and after_offset is not None:
            new = words[1] if len(words) > 1 and words[1] else replid
            if not REPLID.fullmatch(new):
                raise ReplicationProtocolError(f"bad +CONTINUE reply {line!r}", path=self.path)
            self.replid = new
            self._start_stream(after_offset, durable=after_offset)
            return Continue(new, after_offset, replid if new != replid else None)
        if words[0] != "+FULLRESYNC" or len(words) != 3 or not REPLID.fullmatch(words[1]):
            raise ReplicationProtocolError(f"unexpected reply to PSYNC: {line!r}", path=self.path)
        try:
            offset = int(words[2])
        except ValueError:
            raise ReplicationProtocolError(
                f"bad +FULLRESYNC offset {line!r}", path=self.path
            ) from None
        self.replid = words[1]
        return self._full_resync(wire, offset)

    def _connect(self) -> Wire:
        sock = dial(self.address, self._options)
        self._last_io_us = self._clock.now_us()
        return Wire(sock, self.path, self._options.timeout_ms)

    def _handshake(self, wire: Wire) -> None:
        """PING, then AUTH, ``INFO server`` and both REPLCONFs in one write, replies read in
        order (as ``syncWithMaster`` does); then, to Valkey only, ``REPLCONF version`` (Redis
        refuses an option it does not know; an ``INFO`` refused means Redis's handshake)."""
        address = self.address
        wire.send(encode_command(b"PING"))
        pong = self._reply(wire, "PING")
        if pong.startswith("-"):
            code = pong[1:].split(" ", 1)[0]
            needs_auth = code in ("NOAUTH", "NOPERM") or pong.startswith(
                "-ERR operation not permitted"
            )
            if not needs_auth or address.password is None:
                raise reply_error("PING", pong, self.path)
        port = self._options.listening_port
        if port is None:
            port = wire.sock.getsockname()[1]
        commands = []
        if address.password is not None:
            user = () if address.username is None else (address.username.encode(),)
            commands.append(("AUTH", encode_command(b"AUTH", *user, address.password.encode())))
        commands.append(("INFO server", encode_command(b"INFO", b"server")))
        commands.append(
            (
                "REPLCONF listening-port",
                encode_command(b"REPLCONF", b"listening-port", b"%d" % port),
            )
        )
        commands.append(
            ("REPLCONF capa", encode_command(b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"))
        )
        wire.send(b"".join(command for _, command in commands))
        for step, _ in commands:
            reply = self._reply(wire, step)
            if step == "INFO server":
                info = self._info_server(wire, reply)
                self.valkey_version = None if info is None else valkey_version(info)
                if info is not None and server_mode(info) == "cluster":
                    self.cluster_mode = True
                continue
            if reply.startswith("-"):
                code = reply[1:].split(" ", 1)[0]
                # Redis ignores REPLCONF errors (older masters); a permission error is not one.
                if step == "AUTH" or code in AUTH_CODES:
                    raise reply_error(step, reply, self.path)
        if self.valkey_version is not None:
            wire.send(encode_command(b"REPLCONF", b"version", VALKEY_REPLICA_VERSION))
            reply = self._reply(wire, "REPLCONF version")
            if reply.startswith("-") and reply[1:].split(" ", 1)[0] in AUTH_CODES:
                raise reply_error("REPLCONF version", reply, self.path)

    def _info_server(self, wire: Wire, reply: str) -> bytes | None:
        """The body of the ``INFO server`` reply whose first line is ``reply`` (read here), or
        ``None``: an error (the user may not run ``INFO``).

        Raises:
            ReplicationProtocolError: a reply that is neither a bulk string nor an error.
        """
        if reply.startswith("-"):
            return None
        if not (reply.startswith("$") and reply[1:].isdigit()):
            raise ReplicationProtocolError(
                f"unexpected reply to INFO server: {reply[:60]!r}", path=self.path
            )
        return wire.read_exact(int(reply[1:]) + 2, "reading the reply to INFO server")

    def _reply(self, wire: Wire, step: str) -> str:
        line = wire.readline(f"waiting for the reply to {step}")
        try:
            return line.decode()
        except UnicodeDecodeError:
            raise ReplicationProtocolError(
                f"a reply to {step} that is not text: {line[:60]!r}", path=self.path
            ) from None

    def _full_resync(self, wire: Wire, offset: int) -> FullResync:
        keepalives = 0
        while not (header := wire.readline("waiting for the RDB")):
            keepalives += 1
        text = header.decode(errors="replace")
        if header.startswith(b"-"):
            raise ReplicationUnavailableError(
                "Redis aborted the full resync", reply=text[1:], path=self.path
            )
        payload: SizedPayload | MarkedPayload
        if header.startswith(b"$EOF:") and len(header) == 5 + MARK_BYTES:
            payload = MarkedPayload(wire, header[5:], self._diskless_end)
            size: int | None = None
        elif header.startswith(b"$") and header[1:].isdigit():
            size = int(header[1:])
            payload = SizedPayload(wire, size)
        else:
            raise ReplicationProtocolError(
                f"expected the RDB's header ($<length> or $EOF:<mark>), got {text[:60]!r}",
                path=self.path,
            )
        self._payload = payload
        self._payload_file = buffered(payload)
        self._offset = offset
        return FullResync(self.replid or "", offset, self._payload_file, size, keepalives)

    def _diskless_end(self) -> None:
        """After a diskless RDB the master sends commands only once it hears an ACK; an ACK
        that arrives before it noticed its fork ended is not enough (``replconfCommand``), so
        :meth:`read_batch` repeats it every :data:`RESTART_ACK_MS` of silence until the
        stream begins (Redis's replicas repeat theirs every second)."""
        self._awaiting_stream_ms = 0
        self.send_ack()

    def _start_stream(self, offset: int, durable: int) -> None:
        assert self._wire is not None
        self._splitter = CommandSplitter(offset, self.path)
        self._splitter.feed(self._wire.buf)
        self._wire.buf = b""
        self._offset = offset
        self._durable = durable
        self._ack_due_us = self._last_io_us = self._clock.now_us()  # the first read ACKs

    # -- the command stream --------------------------------------------------------------

    @property
    def offset(self) -> int:
        """The replication offset after the last command returned (after :meth:`psync`: the
        offset it named)."""
        return self._offset

    @property
    def rdb_bytes(self) -> int:
        """Bytes of the full resync's RDB read so far (0 after a ``+CONTINUE``)."""
        return 0 if self._payload is None else self._payload.delivered_bytes

    @property
    def durable_offset(self) -> int:
        """The offset last passed to :meth:`ack` (0 before any, after a full resync)."""
        return self._durable

    def read_batch(self, max_wait_ms: int = 1000) -> list[ReplCommand]:
        """The commands that arrived, whole, in stream order; waits up to about
        ``max_wait_ms`` when none has (0: do not wait), and may return an empty list.

        Every command comes as :class:`ReplCommand` ``(start_offset, end_offset, argv)``,
        the ``PING``, ``SELECT``, ``MULTI``/``EXEC`` and ``REPLCONF GETACK`` the master sends
        included; each starts where the one before ended. A ``REPLCONF GETACK`` is answered
        at once with the durable offset (and again as soon as :meth:`ack` advances it); an
        ACK also goes out every ``ack_interval_ms``.

        Raises:
            InvalidArgumentError: no :meth:`psync` yet, or a full resync's payload not read
                to its end.
            UnavailableError: the connection closed, failed, or stayed silent for
                ``timeout_ms``; ``offset`` is the end of the last whole command returned
                (an incomplete command is never returned).
            ReplicationProtocolError: bytes that are not commands (``offset``: where).
        """
        splitter = self._stream()
        wire = self._wire
        assert wire is not None
        clock = self._clock
        wait_ms = min(max_wait_ms, self._options.ack_interval_ms)
        waited_ms = 0
        while not (batch := splitter.commands()):
            self._maybe_ack()
            data = wire.recv_wait(READ_BYTES, wait_ms, "in the command stream", self._offset)
            if data is not None:
                splitter.feed(data)
                self._last_io_us = clock.now_us()
                self._awaiting_stream_ms = None
                continue
            if self._awaiting_stream_ms is not None:
                self._awaiting_stream_ms += wait_ms
                if self._awaiting_stream_ms >= RESTART_ACK_MS:
                    self._awaiting_stream_ms = 0
                    self.send_ack()
            silent_us = clock.now_us() - self._last_io_us
            if silent_us >= self._options.timeout_ms * 1000:
                raise wire.unavailable(
                    f"no data from the master for {silent_us // 1000} ms (timeout_ms "
                    f"{self._options.timeout_ms})",
                    self._offset,
                )
            waited_ms += wait_ms
            if waited_ms >= max_wait_ms:
                break
        getack = False
        if batch:
            self._offset = batch[-1].end_offset
            for start, _, argv in batch:
                if (
                    len(argv) >= 2
                    and len(argv[0]) == 8
                    and argv[0].upper() == b"REPLCONF"
                    and argv[1].upper() == b"GETACK"
                ):
                    getack = True
                    self._getack_offset = start
        self._maybe_ack(getack)
        return batch

    def commands(self, max_wait_ms: int = 1000) -> Iterator[ReplCommand]:
        """Every command of the stream, as :meth:`read_batch` returns them, without end.

        Raises:
            As :meth:`read_batch`.
        """
        while True:
            yield from self.read_batch(max_wait_ms)

    def ack(self, offset: int) -> None:
        """Declare every change up to replication offset ``offset`` durable: the next ACK
        (periodic, or the answer to a ``GETACK``) acknowledges it. Thread-safe; sends
        nothing itself.

        Raises:
            InvalidArgumentError: ``offset`` beyond what was received, or below an offset
                acknowledged before.
        """
        if offset > self._offset:
            raise InvalidArgumentError(
                f"cannot acknowledge offset {offset}: only {self._offset} was received",
                path=self.path,
            )
        if offset < self._durable:
            raise InvalidArgumentError(
                f"cannot acknowledge offset {offset} after {self._durable}", path=self.path
            )
        self._durable = offset

    def send_ack(self) -> None:
        """Send ``REPLCONF ACK <durable offset>`` now (:meth:`read_batch` does it on its
        own every ``ack_interval_ms``; a caller that does not read for longer calls this),
        from the thread that reads (TLS connections are not for concurrent use).

        Raises:
            UnavailableError: the connection failed.
        """
        if self._wire is None:
            raise InvalidArgumentError("not connected: call psync first", path=self.path)
        durable = self._durable
        self._wire.send(encode_command(b"REPLCONF", b"ACK", b"%d" % durable), self._offset)
        self._acked = durable
        self._ack_due_us = self._clock.now_us() + self._options.ack_interval_ms * 1000

    def _maybe_ack(self, getack: bool = False) -> None:
        """ACK when asked (``getack``), when due, or when the durable offset advanced while
        a ``GETACK`` (a client's ``WAIT``) still waits for the offset it stood at."""
        if (
            getack
            or self._clock.now_us() >= self._ack_due_us
            or self._acked < self._getack_offset <= self._durable
        ):
            self.send_ack()

    def _stream(self) -> CommandSplitter:
        if self._splitter is not None:
            return self._splitter
        payload, file = self._payload, self._payload_file
        if payload is None or file is None:
            raise InvalidArgumentError("not connected: call psync first", path=self.path)
        if not payload.ended:
            raise InvalidArgumentError(
                f"read the RDB payload to its end first ({payload.delivered_bytes} bytes read)",
                path=self.path,
            )
        unread = len(file.read())  # the payload ended: this never waits
        if unread:
            raise InvalidArgumentError(
                f"{unread} bytes of the RDB payload were not read", path=self.path
            )
        self._start_stream(self._offset, durable=self._durable)
        return self._splitter  # type: ignore[return-value]

    def close(self) -> None:
        """Close the connection (Redis drops the replica); idempotent."""
        if self._wire is not None:
            self._wire.close()
        if self._payload_file is not None:
            self._payload_file.close()

    def __enter__(self) -> ReplicaConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
