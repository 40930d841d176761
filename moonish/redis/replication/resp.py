"""Splitting a Redis replication stream into commands, with the exact replication offset of each.

Wire grammar (Redis ``networking.c`` ``processMultibulkBuffer``, which a replica runs on the
stream its master sends; the master writes every command as a multibulk array,
``replication.c`` ``replicationFeedSlaves``)::

    stream  = command*
    command = "*" count CRLF ( "$" length CRLF <length bytes> CRLF ){count}
    count   = 1*DIGIT (at least 1)      length = 1*DIGIT

The master's replication offset counts every byte of this stream, ``PING`` and ``SELECT`` and
``REPLCONF GETACK`` included. A command that starts at offset ``s`` and takes ``n`` bytes ends
at ``s + n``, the offset a replica that processed it holds (and sends in ``REPLCONF ACK``);
``PSYNC <replid> <s + n + 1>`` asks for what follows it. Offsets are counted from the bytes as
they stand, so they are exact whatever the digits look like; anything outside the grammar (an
inline command, a RESP3 type, a bulk without its CRLF, a header line longer than
:data:`MAX_HEADER_BYTES`) is a :class:`ReplicationProtocolError` naming its offset.

Incomplete bytes at the end are kept until more arrive: a command is returned only whole.
Buffered bytes are joined only once the command they belong to is complete (its size is known
from its headers), so a value of many megabytes costs one copy, not one per read.
"""

from __future__ import annotations

from typing import NamedTuple

from moonish.errors import CorruptionError

MAX_HEADER_BYTES = 32
"""A ``*<count>`` or ``$<length>`` line this long without its CRLF is not Redis's (a 64-bit
count has 20 digits)."""
_CRLF = b"\r\n"
_STAR, _DOLLAR = 0x2A, 0x24


class ReplicationProtocolError(CorruptionError):
    """The master sent bytes that are not the replication protocol (``offset``: the replication
    offset, or for the handshake and the RDB transfer the byte that failed; ``path``: the
    master's address)."""


class ReplCommand(NamedTuple):
    """One command of the replication stream: it occupies ``[start_offset, end_offset)`` of the
    master's replication offsets; ``argv`` as sent (the command name in the master's case)."""

    start_offset: int
    end_offset: int
    argv: list[bytes]


def encode_command(*argv: bytes) -> bytes:
    """``argv`` as a RESP multibulk array, as a replica sends its commands to a master."""
    parts = [b"*%d\r\n" % len(argv)]
    for arg in argv:
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class CommandSplitter:
    """Feeds on the stream's bytes as they arrive; returns its whole commands with offsets.

    Args:
        offset: the replication offset of the first byte that will be fed.
        path: the master's address, named in errors.
    """

    def __init__(self, offset: int, path: str) -> None:
        self.offset = offset
        """Offset after the last command returned (where the buffered bytes start)."""
        self._path = path
        self._buf = b""
        self._chunks: list[bytes] = []  # fed, not yet joined to _buf
        self._chunk_bytes = 0
        self._need = 1  # bytes (from the start of _buf) needed before parsing can progress

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed that are not part of a returned command (a command still incomplete)."""
        return len(self._buf) + self._chunk_bytes

    def feed(self, data: bytes) -> None:
        """Append the next bytes of the stream."""
        if data:
            self._chunks.append(data)
            self._chunk_bytes += len(data)

    def commands(self) -> list[ReplCommand]:
        """The whole commands fed so far and not yet returned, in stream order.

        Raises:
            ReplicationProtocolError: bytes outside the grammar; ``offset`` is where the
                command holding them starts, commands before it having been returned by
                earlier calls (or are returned first: the error is raised on the next call).
        """
        if len(self._buf) + self._chunk_bytes < self._need:
            return []
        if self._chunks:
            self._buf = (
                b"".join([self._buf, *self._chunks]) if self._buf else b"".join(self._chunks)
            )
            self._chunks.clear()
            self._chunk_bytes = 0
        buf = self._buf
        size = len(buf)
        find = buf.find
        out: list[ReplCommand] = []
        append = out.append
        offset = self.offset
        pos = 0  # where the command being parsed starts in buf (at replication offset `offset`)
        need = 1
        try:
            while pos < size:
                if buf[pos] != _STAR:
                    raise _Damage("expected '*' (a command array)")
                line_end = find(_CRLF, pos + 1, pos + MAX_HEADER_BYTES)
                if line_end < 0:
                    if size - pos >= MAX_HEADER_BYTES:
                        raise _Damage("a command count without its CRLF")
                    need = size - pos + 1
                    break
                digits = buf[pos + 1 : line_end]
                if not digits.isdigit() or digits[0] == 0x30:
                    raise _Damage(f"bad command count {digits!r}")
                argv: list[bytes] = []
                at = line_end + 2
                for _ in range(int(digits)):
                    if at >= size:
                        need = at - pos + 1
                        break
                    if buf[at] != _DOLLAR:
                        raise _Damage(f"expected '$' (a bulk string) at +{at - pos}")
                    line_end = find(_CRLF, at + 1, at + MAX_HEADER_BYTES)
                    if line_end < 0:
                        if size - at >= MAX_HEADER_BYTES:
                            raise _Damage(f"a bulk length without its CRLF at +{at - pos}")
                        need = size - pos + 1
                        break
                    digits = buf[at + 1 : line_end]
                    if not digits.isdigit():
                        raise _Damage(f"bad bulk length {digits!r} at +{at - pos}")
                    start = line_end + 2
                    end = start + int(digits)
                    if end + 2 > size:
                        need = end + 2 - pos
                        break
                    if buf[end] != 0x0D or buf[end + 1] != 0x0A:
                        raise _Damage(f"a bulk string not followed by CRLF at +{end - pos}")
                    argv.append(buf[start:end])
                    at = end + 2
                else:
                    append(ReplCommand(offset, offset + at - pos, argv))
                    offset += at - pos
                    pos = at
                    continue
                break  # the command at pos is incomplete
        except _Damage as exc:
            if not out:  # the commands before the damage are returned first
                raise ReplicationProtocolError(
                    f"replication stream: {exc.what}", path=self._path, offset=offset
                ) from None
            need = 1
        self.offset = offset
        self._buf = buf[pos:] if pos else buf
        self._need = need
        return out


class _Damage(Exception):
    """Internal: bytes outside the grammar at the command being parsed."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
