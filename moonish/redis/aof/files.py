"""Reading a Redis 7 multi-part append-only file: the manifest, then commands from each file.

Sources: Redis 7 ``aof.c`` and the "Persistence" docs. The manifest lists one file per line as
``file <name> seq <n> type <b|h|i>`` (base, history, incremental); a replay loads the base file,
then the incremental files by ascending ``seq``; history files are not replayed. Each file is a
stream of RESP arrays (one command each) as Redis writes them (``*<argc>\r\n`` then
``$<len>\r\n<bytes>\r\n`` per argument); lines starting with ``#`` are annotations that Redis's
loader skips, and so do we. RESP is parsed with hiredis.

A base file that starts with an RDB preamble (``REDIS``, or Valkey 9's ``VALKEY``;
``aof-use-rdb-preamble yes``) is an RDB file: moonish.redis.rdb.reader reads it,
:class:`AofCommands` refuses it. Valkey 9 writes the same manifest and files (checked on
Valkey 9.1.2: ``file appendonly.aof.1.base.rdb seq 1 type b``, a ``VALKEY080`` base).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Final

import hiredis

from moonish.errors import InvalidArgumentError, UnsupportedFormatError

MANIFEST_SUFFIX: Final = ".manifest"
READ_CHUNK_BYTES: Final = 1024 * 1024
FEED_BYTES: Final = 16 * 1024
"""What :class:`AofCommands` reads and feeds hiredis at a time: its reader moves the unread
rest of its buffer after each KiB it parses, which costs more the larger the buffer."""
RDB_MAGICS: Final = (b"REDIS", b"VALKEY")
"""How an RDB file starts: Redis ``rdb.c``; Valkey 9 ``rdb.c`` (moonish.redis.rdb.valkey)."""


def starts_with_rdb(path: str) -> bool:
    """Whether the file at ``path`` starts like an RDB file (:data:`RDB_MAGICS`).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as handle:
        return handle.read(max(map(len, RDB_MAGICS))).startswith(RDB_MAGICS)


class AofFormatError(InvalidArgumentError):
    """The append-only file is not a stream of RESP command arrays (path, offset named)."""

    kind = "invalid_argument"


@dataclass(frozen=True, slots=True)
class AofFile:
    """One file of a multi-part AOF, as its manifest lists it."""

    name: str
    seq: int
    type: str
    """``b`` base, ``h`` history, ``i`` incremental."""


def find_manifest(appendonlydir: str) -> str:
    """Path of the manifest in ``appendonlydir``.

    Raises:
        InvalidArgumentError: no directory, or not exactly one ``*.manifest`` file in it.
    """
    if not os.path.isdir(appendonlydir):
        raise InvalidArgumentError("AOF directory does not exist", path=appendonlydir)
    manifests = [n for n in os.listdir(appendonlydir) if n.endswith(MANIFEST_SUFFIX)]
    if len(manifests) != 1:
        raise InvalidArgumentError(
            f"expected one *{MANIFEST_SUFFIX} file, found {len(manifests)}", path=appendonlydir
        )
    return os.path.join(appendonlydir, manifests[0])


def read_manifest(appendonlydir: str) -> list[AofFile]:
    """The files to replay, in replay order: the base file, then incremental files by ``seq``.

    Raises:
        InvalidArgumentError: missing manifest, a malformed line, or more than one base file.
    """
    path = find_manifest(appendonlydir)
    files: list[AofFile] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            words = shlex.split(line)
            fields = dict(zip(words[0::2], words[1::2], strict=False))
            try:
                entry = AofFile(fields["file"], int(fields["seq"]), fields["type"])
            except (KeyError, ValueError):
                raise InvalidArgumentError(
                    f"manifest line {number} is not 'file <name> seq <n> type <b|h|i>': "
                    f"{line.strip()!r}",
                    path=path,
                ) from None
            if entry.type not in ("b", "h", "i"):
                raise InvalidArgumentError(f"manifest line {number}: unknown type", path=path)
            files.append(entry)
    bases = [f for f in files if f.type == "b"]
    if len(bases) > 1:
        raise InvalidArgumentError("manifest lists more than one base file", path=path)
    return bases + sorted((f for f in files if f.type == "i"), key=lambda f: f.seq)


def resp_bytes(argv: list[bytes]) -> int:
    """Size of ``argv`` as Redis writes it to the AOF: ``*<n>\r\n`` (3 bytes and the digits of
    ``n``), then per argument ``$<len>\r\n<bytes>\r\n`` (5 bytes, the digits of its length and
    its bytes)."""
    size = 3 + _digits(len(argv)) + 5 * len(argv)
    for arg in argv:
        size += len(arg) + _digits(len(arg))
    return size


def _digits(n: int) -> int:
    """How many decimal digits ``n`` (0 or more) has: a few comparisons, no string."""
    if n < 10:
        return 1
    if n < 100:
        return 2
    if n < 1000:
        return 3
    if n < 10000:
        return 4
    digits = 5
    n //= 100000
    while n:
        digits += 1
        n //= 10
    return digits


class AofCommands:
    """Iterates ``(offset, argv)`` for each command of one AOF file, in file order.

    After iteration, ``trailing_bytes`` holds how many bytes at the end did not form a whole
    command (a torn last write) and ``trailing_offset`` where they start.

    Raises (while iterating):
        AofFormatError: bytes that are not RESP command arrays (with the byte offset).
        UnsupportedFormatError: a base file with an RDB preamble.
    """

    def __init__(self, path: str, start: int = 0) -> None:
        self.path = path
        self.start = start
        """Byte offset of the first command to read (a command boundary)."""
        self.trailing_bytes = 0
        self.trailing_offset = 0

    def __iter__(self) -> Iterator[tuple[int, list[bytes]]]:
        for offset, _, argv in self.spans():
            yield offset, argv

    def spans(self) -> Generator[tuple[int, int, list[bytes]], None, None]:
        """``(offset, end offset, argv)`` for each command: it occupies ``[offset, end)``."""
        if starts_with_rdb(self.path):
            raise UnsupportedFormatError(
                "AOF file starts with an RDB preamble; moonish imports plain-RESP AOFs "
                "(aof-use-rdb-preamble no)",
                path=self.path,
                offset=0,
            )
        with open(self.path, "rb") as handle:
            handle.seek(self.start)
            reader = hiredis.Reader()
            pos = fed = self.start
            while True:
                try:
                    item = reader.gets()
                except hiredis.ProtocolError as exc:
                    handle.seek(pos)
                    line = handle.readline()
                    if not line.startswith(b"#") or not line.endswith(b"\n"):
                        raise AofFormatError(
                            f"not a RESP command: {exc}", path=self.path, offset=pos
                        ) from None
                    pos = fed = pos + len(line)  # an annotation (#TS:...): Redis skips it too
                    reader = hiredis.Reader()
                    continue
                if item is False:
                    chunk = handle.read(FEED_BYTES)
                    if not chunk:
                        break
                    reader.feed(chunk)
                    fed += len(chunk)
                    continue
                end = _span_end(item, pos)
                if end < 0:
                    raise AofFormatError(
                        f"expected a command (an array of bulk strings), got {item!r:.60}",
                        path=self.path,
                        offset=pos,
                    )
                yield pos, end, item
                pos = end
            if pos > fed:
                raise AofFormatError(
                    "commands are not in Redis's canonical RESP form", path=self.path, offset=fed
                )
            self.trailing_offset, self.trailing_bytes = pos, fed - pos


def _span_end(item: object, pos: int) -> int:
    """Where the command ``item`` (what hiredis parsed at ``pos``) ends, as :func:`resp_bytes`
    counts it; -1 when it is not a command: a non-empty array of bulk strings."""
    if type(item) is not list or not item:
        return -1
    for arg in item:
        if type(arg) is not bytes:
            return -1
    return pos + resp_bytes(item)
