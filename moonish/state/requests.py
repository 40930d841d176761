"""Requests to the writer that holds a shard: ``moonish wal checkpoint`` asks a running writer
(a capture, an import) for a snapshot, since the writer's lock keeps anyone else from opening
the shard (docs/images.md, "Snapshots and recovery").

Each :class:`~moonish.state.shard.ShardWriter` listens on a Unix stream socket in Linux's
abstract namespace (no file to leave behind; the name is gone with the process), named from
the shard directory's real path: ``\\0moonish-writer-<first 40 hex digits of its SHA-256>``.
Only a process of the same user, or root, is answered (the peer's ``SO_PEERCRED``). One
request per connection, one JSON line each way (UTF-8)::

    -> {"request": "checkpoint", "label": "<text>"}
    <- {"snapshot": "<path>", "lsn": <L>, "keys": <n>}      the snapshot is in place and its
                                                              checkpoint record appended
    <- {"error": "<text>"}

The snapshot is written in the background (moonish.state.autosnapshot), so appends go on while
it is; the answer comes once it is in place. Requests are served one at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import selectors
import socket
import struct
import threading
from typing import Protocol

import orjson

from moonish.errors import UnavailableError
from moonish.state.autosnapshot import BackgroundSnapshot

_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
MAX_REQUEST_BYTES = 65536


def socket_name(shard_dir: str) -> bytes:
    """The abstract socket address of the writer of ``shard_dir``."""
    digest = hashlib.sha256(os.path.realpath(shard_dir).encode()).hexdigest()[:40]
    return b"\0moonish-writer-" + digest.encode()


class RequestHost(Protocol):
    """What the server needs of its writer (moonish.state.shard.ShardWriter)."""

    shard_dir: str

    # The defaults are ShardWriter's: a compiled module evaluates them (``...`` is no str).
    def snapshot_in_background(
        self, reason: str = "asked", label: str = ""
    ) -> BackgroundSnapshot: ...

    def wait_snapshot(self, poll_s: float = 0.01) -> BackgroundSnapshot | None: ...


class RequestServer:
    """A writer's socket, answered by the process's one request thread (started with the
    first, a daemon) until :meth:`close`. Costs one descriptor per writer.

    Raises:
        OSError: the socket could not be made (another process holds the name: a writer of
            the same shard, which its lock forbids).
    """

    def __init__(self, host: RequestHost) -> None:
        self._host = host
        self._listener: socket.socket | None = socket.socket(
            socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC
        )
        try:
            self._listener.bind(socket_name(host.shard_dir))
            self._listener.listen(8)
            _DISPATCHER.add(self._listener, self)
        except OSError:
            self._listener.close()
            raise

    def close(self) -> None:
        """Stop answering (a request being answered ends with the writer's snapshot).
        Idempotent."""
        listener, self._listener = self._listener, None
        if listener is not None:
            _DISPATCHER.remove(listener)

    def answer(self, connection: socket.socket) -> None:
        """Read one request from ``connection`` and answer it (module docstring)."""
        try:
            connection.settimeout(10)
            raw = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size)
            _, uid, _ = _CREDENTIALS.unpack(raw)
            if uid not in (0, os.getuid()):
                _send(connection, {"error": "refused: another user's process"})
                return
            request = orjson.loads(_read_line(connection))
            if not isinstance(request, dict) or request.get("request") != "checkpoint":
                _send(connection, {"error": f"unknown request {request!r}"})
                return
            label = request.get("label") or ""
            connection.settimeout(None)  # the snapshot takes as long as it takes
            _send(connection, self._checkpoint(str(label)))
        except (OSError, ValueError) as exc:  # a client gone or garbled: the next one
            with contextlib.suppress(OSError):
                _send(connection, {"error": f"bad request: {exc}"})
        except Exception as exc:  # the writer's refusal (stopped, fork failed): said
            with contextlib.suppress(OSError):
                _send(connection, {"error": repr(exc)})

    def _checkpoint(self, label: str) -> dict[str, object]:
        host = self._host
        host.wait_snapshot()  # one child at a time
        snapshot = host.snapshot_in_background("asked", label)
        if not label:  # as an offline checkpoint labels it
            snapshot.label = os.path.basename(snapshot.path)
        while not snapshot.finished:
            host.wait_snapshot()
        if snapshot.error is not None:
            return {"error": f"the snapshot failed: {snapshot.error}"}
        with open(snapshot.path, "rb") as file:
            keys = orjson.loads(file.readline())["keys"]
        return {"snapshot": snapshot.path, "lsn": snapshot.lsn, "keys": keys}


class _Dispatcher:
    """The process's request thread: waits on every writer's socket, answers one request at
    a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[socket.socket, RequestServer] = {}
        self._serving: threading.Thread | None = None  # not _thread: mypyc would name the C
        # field __thread, a C keyword
        self._selector: selectors.BaseSelector | None = None
        self._wake = (-1, -1)

    def add(self, listener: socket.socket, server: RequestServer) -> None:
        with self._lock:
            if self._serving is None:
                self._selector = selectors.DefaultSelector()
                self._wake = os.pipe2(os.O_CLOEXEC)
                self._selector.register(self._wake[0], selectors.EVENT_READ)
                self._serving = threading.Thread(
                    target=self._serve, name="moonish-writer-requests", daemon=True
                )
                self._serving.start()
            assert self._selector is not None
            self._servers[listener] = server
            self._selector.register(listener, selectors.EVENT_READ)

    def remove(self, listener: socket.socket) -> None:
        with self._lock:
            if self._servers.pop(listener, None) is not None and self._selector is not None:
                self._selector.unregister(listener)
            listener.close()
            os.write(self._wake[1], b"x")  # select again, without it

    def _serve(self) -> None:
        selector = self._selector
        assert selector is not None
        while True:
            for key, _ in selector.select():
                if key.fileobj == self._wake[0]:
                    os.read(self._wake[0], 4096)
                    continue
                accepted = self._accept(key.fileobj)
                if accepted is not None:
                    connection, server = accepted
                    with connection:
                        server.answer(connection)

    def _accept(self, listener: object) -> tuple[socket.socket, RequestServer] | None:
        """A connection on ``listener`` and its server; ``None`` when the listener was removed
        since the select, or the client has gone. (A separate function: mypyc does not
        compile ``continue`` inside ``with``.)"""
        with self._lock:
            if not isinstance(listener, socket.socket) or listener not in self._servers:
                return None
            server = self._servers[listener]
            try:
                connection, _ = listener.accept()
            except OSError:
                return None
        return connection, server

    def forget(self) -> None:
        """In a forked child: no thread runs there, and the sockets are the parent's."""
        self._lock = threading.Lock()
        self._servers = {}
        self._serving = None
        self._selector = None
        self._wake = (-1, -1)


_DISPATCHER = _Dispatcher()
os.register_at_fork(after_in_child=_DISPATCHER.forget)


def ask_checkpoint(shard_dir: str, label: str = "") -> dict[str, object] | None:
    """Ask the writer of ``shard_dir`` for a snapshot and wait for it; ``None`` when no writer
    listens (open the shard instead).

    Returns:
        ``{"snapshot": <path>, "lsn": <L>, "keys": <n>}``.

    Raises:
        UnavailableError: the writer answered with an error, or went away before answering.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as connection:
        try:
            connection.connect(socket_name(shard_dir))
        except (ConnectionRefusedError, FileNotFoundError):
            return None
        try:
            _send(connection, {"request": "checkpoint", "label": label})
            answer = orjson.loads(_read_line(connection))
        except (OSError, ValueError) as exc:
            raise UnavailableError(
                f"the shard's writer did not answer the checkpoint request: {exc}",
                path=shard_dir,
            ) from None
    if not isinstance(answer, dict) or "error" in answer:
        error = answer.get("error") if isinstance(answer, dict) else answer
        raise UnavailableError(
            f"the shard's writer refused the checkpoint: {error}", path=shard_dir
        )
    return answer


def _send(connection: socket.socket, message: dict[str, object]) -> None:
    connection.sendall(orjson.dumps(message) + b"\n")


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(4096)
        if not chunk:
            raise ValueError("the connection closed before a whole line")
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise ValueError(f"a line longer than {MAX_REQUEST_BYTES} bytes")
    return data
