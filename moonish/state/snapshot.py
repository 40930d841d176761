"""Snapshot files: a shard's keyspace at an LSN (docs/images.md, "Snapshots").

``<shard_dir>/<lsn:016x>.snap``, UTF-8 NDJSON::

    {"format": "moonish-snapshot", "version": 2, "shard": <id>, "lsn": <L>, "keys": <n>,
     "libraries": <m>, "created_us": <µs since the Unix epoch>[, "source": <position text>]}
    <lossless image of key 1>            n lines, by db then key bytes (moonish.values.model)
    ...
    {"library": <name>, "code": <text>}  m lines, by name (moonish.state.libraries)
    ...
    {"crc32c": <crc32c of every byte before this line>}

Versions: 1 (a stream value is the entries list alone, with ``"last_id"`` beside it; no
``libraries`` field and no library lines), 2 (stream values hold their counters and consumer
groups, docs/images.md; function libraries after the keys). Both are read; 2 is written.

``source`` is the shard's source position after record L (the last one a record carried,
moonish.redis.routing.sources), absent when it has none. The snapshot holds the effect of
every record with LSN <= L and nothing after; it is written to a temporary name, synced and
renamed, so a snapshot file is complete or absent.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import crc32c
import orjson

from moonish.errors import CorruptionError, UnsupportedFormatError
from moonish.fileio import replace_atomically
from moonish.log.segment import SNAPSHOT_SUFFIX, list_snapshots, snapshot_path
from moonish.state.keyspace import Keyspace
from moonish.state.libraries import Libraries, library_lines
from moonish.values.model import state_image

FORMAT = "moonish-snapshot"
VERSION = 2
"""The version this build writes."""
SUPPORTED_VERSIONS = (1, 2)
"""Every version this build reads."""
__all__ = [
    "SNAPSHOT_SUFFIX",
    "Snapshot",
    "drop_old_snapshots",
    "list_snapshots",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]
KEEP_SNAPSHOTS = 2
"""Snapshots kept per shard: the newest and the one before it."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A verified snapshot: its header fields, its image lines and its library lines (bytes,
    no newline; no library lines in version 1)."""

    path: str
    shard: int
    lsn: int
    created_us: int
    images: list[bytes]
    libraries: list[bytes] = field(default_factory=list)
    source: bytes = b""


def write_snapshot(
    shard_dir: str,
    shard: int,
    lsn: int,
    keyspace: Keyspace,
    created_us: int,
    libraries: Libraries | None = None,
    source: bytes = b"",
    *,
    drop_older: bool = True,
) -> str:
    """Write ``keyspace`` and ``libraries`` as the snapshot at ``lsn`` (version
    :data:`VERSION`, with the source position ``source``, UTF-8), a batch of images at a time
    (no copy of the whole file in memory); with ``drop_older``, drop all but the newest
    :data:`KEEP_SNAPSHOTS` (:func:`drop_old_snapshots`). Returns the file's path."""
    library = library_lines(libraries or Libraries())
    fields: dict[str, object] = {
        "format": FORMAT,
        "version": VERSION,
        "shard": shard,
        "lsn": lsn,
        "keys": len(keyspace),
        "libraries": len(library),
        "created_us": created_us,
    }
    if source:
        fields["source"] = source.decode()
    path = snapshot_path(shard_dir, lsn)
    replace_atomically(path, _snapshot_chunks(orjson.dumps(fields), keyspace, library))
    if drop_older:
        drop_old_snapshots(shard_dir)
    return path


_BATCH_KEYS = 1024


def _snapshot_chunks(header: bytes, keyspace: Keyspace, library: list[bytes]) -> Iterator[bytes]:
    """The file's bytes: the header line, the image lines, the library lines, then the
    checksum trailer of every byte before it."""
    crc = crc32c.crc32c(header + b"\n")
    yield header + b"\n"
    batch: list[bytes] = []
    for db, key, entry in keyspace.items():
        batch.append(state_image(db, key, entry))
        if len(batch) == _BATCH_KEYS:
            chunk = b"\n".join(batch) + b"\n"
            crc = crc32c.crc32c(chunk, crc)
            yield chunk
            batch = []
    batch += library
    if batch:
        chunk = b"\n".join(batch) + b"\n"
        crc = crc32c.crc32c(chunk, crc)
        yield chunk
    yield b'{"crc32c":%d}\n' % crc


def drop_old_snapshots(shard_dir: str) -> None:
    """Remove all but the newest :data:`KEEP_SNAPSHOTS` snapshots of the shard."""
    for old in list_snapshots(shard_dir)[:-KEEP_SNAPSHOTS]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(snapshot_path(shard_dir, old))


def read_snapshot(path: str) -> Snapshot:
    """Read and verify a snapshot file. The checksum is checked before anything in the file
    is believed, so a damaged byte is never read as a format or version.

    Raises:
        CorruptionError: a bad or unreadable checksum trailer, a checksum that does not match,
            or (under a valid checksum) a header of the wrong format or fields or a key count
            that does not match (path and byte offset in the error).
        UnsupportedFormatError: a version this build does not read (not in
            :data:`SUPPORTED_VERSIONS`).
    """
    with open(path, "rb") as file:
        data = file.read()
    end = data.rfind(b"\n", 0, len(data) - 1) + 1  # where the trailer line starts
    try:
        stored = orjson.loads(data[end:])["crc32c"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise CorruptionError(
            f"snapshot checksum trailer is unreadable: {exc!r}", path=path, offset=end
        ) from None
    if (
        not isinstance(stored, int)
        or data[end:] != b'{"crc32c":%d}\n' % stored  # the trailer exactly as written
        or crc32c.crc32c(data[:end]) != stored
    ):
        raise CorruptionError("snapshot CRC mismatch", path=path, offset=end)
    try:
        header = orjson.loads(data[: data.index(b"\n")])
        if header["format"] != FORMAT:
            raise ValueError(f"format {header['format']!r}")
        version = header["version"]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptionError(f"not a moonish snapshot: {exc!r}", path=path, offset=0) from None
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedFormatError(
            f"snapshot version {version} (this build reads versions {SUPPORTED_VERSIONS})",
            path=path,
            offset=0,
        )
    try:
        shard, lsn, keys, created_us = (
            int(header[name]) for name in ("shard", "lsn", "keys", "created_us")
        )
        libraries = int(header["libraries"]) if version >= 2 else 0
        source = header.get("source", "")
        if not isinstance(source, str):
            raise TypeError(f"source {source!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptionError(f"bad snapshot header: {exc!r}", path=path, offset=0) from None
    lines = data[:end].split(b"\n")[1:-1]
    if len(lines) != keys + libraries or min(keys, libraries) < 0:
        raise CorruptionError(
            f"snapshot has {len(lines)} lines, its header says {keys} keys and {libraries} "
            "libraries",
            path=path,
            offset=0,
        )
    return Snapshot(path, shard, lsn, created_us, lines[:keys], lines[keys:], source.encode())
