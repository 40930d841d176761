"""The bytes of a replication link: a socket with a read buffer, and the full resync's RDB payload
as a file object read straight from it.

Payload framing (Redis ``replication.c``: ``readSyncBulkPayload`` on the replica side,
``sendBulkToSlave`` and ``rdbSaveToSlavesSockets`` on the master side), after the
``+FULLRESYNC`` line::

    payload = "\\n"* ( "$" <length> CRLF <length bytes>          disk-based (repl-diskless-sync no)
                     | "$EOF:" <40-byte mark> CRLF <RDB> <mark> ) diskless (repl-diskless-sync yes)

The newlines are keep-alives a master sends every second while it prepares the RDB; they count
in no offset. A disk-based payload has no trailing CRLF: the command stream follows its last
byte directly. A diskless payload ends where the 40 bytes last received equal the mark; the
master sends nothing after it until the replica's first ``REPLCONF ACK`` (which
:class:`MarkedPayload` triggers through ``on_end``), so the mark is always the end of what was
read, as Redis's replica relies on.

Both payload classes are unbuffered raw streams that never read past the payload; wrap them in
``io.BufferedReader`` (as :func:`buffered`) for :class:`moonish.redis.rdb.reader.RdbReader`, which
reads sequentially and never seeks. Memory stays bounded by the read size plus the 40-byte
mark.
"""

from __future__ import annotations

import io
import socket
import ssl
import threading
from collections.abc import Callable

from moonish.errors import InvalidArgumentError, UnavailableError
from moonish.redis.replication.messages import RedisAddress, ReplicaOptions
from moonish.redis.replication.resp import ReplicationProtocolError

READ_BYTES = 1 << 18
"""One ``recv`` of the command stream or a diskless payload reads at most this much."""
PAYLOAD_BUFFER_BYTES = 1 << 16
"""The buffer :func:`buffered` puts over a payload (the RDB reader reads a few bytes a call)."""
MARK_BYTES = 40
"""``CONFIG_RUN_ID_SIZE``: the diskless EOF mark's length."""
MAX_LINE_BYTES = 1 << 16
"""A handshake reply or payload header longer than this is not Redis's."""


def dial(address: RedisAddress, options: ReplicaOptions) -> socket.socket:
    """A connected socket to ``address`` (TCP_NODELAY; over TLS for ``rediss://``, with
    ``options``' files), within ``connect_timeout_ms``.

    Raises:
        UnavailableError: the connection or the TLS handshake failed (``path``: the address).
        InvalidArgumentError: the master's certificate is not trusted, or the TLS files
            cannot be loaded.
    """
    path = address.path
    context = _tls_context(options, path) if address.tls else None
    try:
        sock = socket.create_connection(
            (address.host, address.port), timeout=options.connect_timeout_ms / 1000
        )
    except OSError as exc:
        raise UnavailableError(f"cannot connect to Redis: {exc}", path=path) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if context is None:
        return sock
    try:
        return context.wrap_socket(sock, server_hostname=address.host)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        raise InvalidArgumentError(
            f"the master's TLS certificate is not trusted: {exc.verify_message}", path=path
        ) from None
    except OSError as exc:
        sock.close()
        raise UnavailableError(f"TLS handshake failed: {exc}", path=path) from None


def _tls_context(options: ReplicaOptions, path: str) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=options.tls_ca_file)
        if options.tls_cert_file is not None:
            context.load_cert_chain(options.tls_cert_file, options.tls_key_file)
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"cannot load the TLS certificates: {exc}", path=path) from None
    return context


class Wire:
    """A connected socket and the bytes read from it but not yet used.

    Args:
        sock: the connected socket (owned: :meth:`close` closes it).
        path: the master's address (``redis://host:port``), named in errors.
        timeout_ms: how long a blocking read waits for a byte before
            :class:`UnavailableError` (Redis's ``repl-timeout``).
    """

    def __init__(self, sock: socket.socket, path: str, timeout_ms: int) -> None:
        self.sock, self.path, self.timeout_ms = sock, path, timeout_ms
        self.buf = b""
        self.received_bytes = 0
        """Bytes received on this connection so far (payload and stream, keep-alives too)."""
        self._send_lock = threading.Lock()

    def unavailable(self, message: str, offset: int | None = None) -> UnavailableError:
        return UnavailableError(message, path=self.path, offset=offset)

    def send(self, data: bytes, offset: int | None = None) -> None:
        """Send all of ``data``; sends from several threads never interleave (over TLS, send
        only from the thread that reads: an SSL connection is not for concurrent use).

        Raises:
            UnavailableError: the connection failed (``offset`` as given).
        """
        try:
            with self._send_lock:
                self.sock.sendall(data)
        except OSError as exc:
            raise self.unavailable(f"sending to the master failed: {exc}", offset) from None

    def recv(self, max_bytes: int, what: str, offset: int | None = None) -> bytes:
        """Up to ``max_bytes`` (at least one), the buffer first; waits up to ``timeout_ms``.

        Raises:
            UnavailableError: the connection closed or failed, or stayed silent for
                ``timeout_ms``; the message names ``what`` was being read.
        """
        if self.buf:
            data, self.buf = self.buf[:max_bytes], self.buf[max_bytes:]
            return data
        return self._recv_blocking(max_bytes, what, offset)

    def _recv_blocking(self, max_bytes: int, what: str, offset: int | None = None) -> bytes:
        data = self.recv_wait(max_bytes, self.timeout_ms, what, offset)
        if data is None:
            raise self.unavailable(
                f"no data from the master for {self.timeout_ms} ms {what}", offset
            )
        return data

    def recv_wait(
        self, max_bytes: int, wait_ms: int, what: str, offset: int | None = None
    ) -> bytes | None:
        """Up to ``max_bytes`` from the socket (not the buffer), or ``None`` when nothing
        arrived within ``wait_ms`` (0: do not wait).

        Raises:
            UnavailableError: the connection closed or failed.
        """
        try:
            self.sock.settimeout(wait_ms / 1000)
            data = self.sock.recv(max_bytes)
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            return None
        except OSError as exc:
            raise self.unavailable(
                f"connection to the master failed {what}: {exc}", offset
            ) from None
        if not data:
            raise self.unavailable(f"the master closed the connection {what}", offset)
        self.received_bytes += len(data)
        return data

    def readline(self, what: str) -> bytes:
        """The next line without its ``\\n`` (and a ``\\r`` before it), as Redis's
        ``syncReadLine`` reads handshake replies.

        Raises:
            UnavailableError: as :meth:`recv`.
            ReplicationProtocolError: no newline within :data:`MAX_LINE_BYTES`.
        """
        start = 0
        while (end := self.buf.find(b"\n", start)) < 0:
            if len(self.buf) > MAX_LINE_BYTES:
                raise ReplicationProtocolError(
                    f"a line of more than {MAX_LINE_BYTES} bytes {what}", path=self.path
                )
            start = len(self.buf)
            self.buf += self._recv_blocking(READ_BYTES, what)
        line, self.buf = self.buf[:end], self.buf[end + 1 :]
        return line[:-1] if line.endswith(b"\r") else line

    def read_exact(self, size_bytes: int, what: str) -> bytes:
        """Exactly ``size_bytes`` bytes, the buffer first (a bulk reply's body).

        Raises:
            UnavailableError: as :meth:`recv`.
        """
        while len(self.buf) < size_bytes:
            self.buf += self._recv_blocking(READ_BYTES, what)
        data, self.buf = self.buf[:size_bytes], self.buf[size_bytes:]
        return data

    def close(self) -> None:
        self.sock.close()


class _Payload(io.RawIOBase):
    """What both framings share: reading from the wire, knowing when the payload ended."""

    def __init__(self, wire: Wire) -> None:
        super().__init__()
        self.wire = wire
        self.delivered_bytes = 0
        self.ended = False
        """Every byte of the payload was handed out (the next read returns ``b""``)."""

    def readable(self) -> bool:
        return True

    def _deliver(self, target: memoryview, data: bytes) -> int:
        size = len(data)
        target[:size] = data
        self.delivered_bytes += size
        return size


class SizedPayload(_Payload):
    """The ``$<length>`` payload: exactly ``size_bytes`` bytes, never one more."""

    def __init__(self, wire: Wire, size_bytes: int) -> None:
        super().__init__(wire)
        self.size_bytes = size_bytes
        self.ended = size_bytes == 0

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        """Read into ``buffer``; 0 at the end of the payload.

        Raises:
            UnavailableError: the connection ended before the payload did.
        """
        left = self.size_bytes - self.delivered_bytes
        if left == 0 or not len(buffer):
            return 0
        what = f"after {self.delivered_bytes} of the RDB's {self.size_bytes} bytes"
        data = self.wire.recv(min(len(buffer), left, READ_BYTES), what)
        size = self._deliver(memoryview(buffer).cast("B"), data)
        self.ended = self.delivered_bytes == self.size_bytes
        return size


class MarkedPayload(_Payload):
    """The ``$EOF:<mark>`` payload: every byte before the 40-byte ``mark``; ``on_end`` runs once
    the mark was read (to send the ACK that starts the command stream)."""

    def __init__(self, wire: Wire, mark: bytes, on_end: Callable[[], None]) -> None:
        super().__init__(wire)
        self.mark = mark
        self._on_end = on_end
        self._held = b""  # received, not handed out: always holds the last 40 bytes seen
        self._mark_seen = False

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        """Read into ``buffer``; 0 at the end of the payload.

        Raises:
            UnavailableError: the connection ended before the mark.
        """
        target = memoryview(buffer).cast("B")
        if not len(target):
            return 0
        while True:
            ready = len(self._held) - (0 if self._mark_seen else MARK_BYTES)
            if ready > 0:
                size = min(ready, len(target))
                data, self._held = self._held[:size], self._held[size:]
                if self._mark_seen and not self._held:
                    self.ended = True
                return self._deliver(target, data)
            if self._mark_seen:
                self.ended = True
                return 0
            what = f"after {self.delivered_bytes + len(self._held)} bytes of the RDB (diskless)"
            self._held += self.wire.recv(READ_BYTES, what)
            if self._held.endswith(self.mark):
                self._held = self._held[:-MARK_BYTES]
                self._mark_seen = True
                self.ended = not self._held
                self._on_end()


def buffered(payload: _Payload) -> io.BufferedReader:
    """``payload`` behind a read buffer: the file object to hand to an RDB reader."""
    return io.BufferedReader(payload, PAYLOAD_BUFFER_BYTES)
