"""Snapshot files: a shard's keyspace at an LSN (docs/images.md, "Snapshots").

``<shard_dir>/<lsn:016x>.snap``, UTF-8 NDJSON::

    {"format": "moonish-snapshot", "version": 1, "shard": <id>, "lsn": <L>, "keys": <n>,
     "created_us": <µs since the Unix epoch>}
    <lossless image of key 1>            n lines, by db then key bytes (moonish.state.values)
    ...
    {"crc32c": <crc32c of every byte before this line>}

The snapshot holds the effect of every record with LSN <= L and nothing after; it is written
to a temporary name, synced and renamed, so a snapshot file is complete or absent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import crc32c
import orjson

from moonish.errors import CorruptionError, UnsupportedFormatError
from moonish.fileio import replace_atomically
from moonish.state.keyspace import Keyspace
from moonish.state.values import state_image

SNAPSHOT_SUFFIX = ".snap"
FORMAT = "moonish-snapshot"
VERSION = 1
KEEP_SNAPSHOTS = 2
"""Snapshots kept per shard: the newest and the one before it."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A verified snapshot: its header fields and its image lines (bytes, no newline)."""

    path: str
    shard: int
    lsn: int
    created_us: int
    images: list[bytes]


def snapshot_path(shard_dir: str, lsn: int) -> str:
    return os.path.join(shard_dir, f"{lsn:016x}{SNAPSHOT_SUFFIX}")


def list_snapshots(shard_dir: str) -> list[int]:
    """LSNs of the shard's snapshot files, oldest first."""
    found = []
    for name in os.listdir(shard_dir):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 16 and not name.startswith("."):
            try:
                found.append(int(stem, 16))
            except ValueError:
                continue
    return sorted(found)


def write_snapshot(
    shard_dir: str, shard: int, lsn: int, keyspace: Keyspace, created_us: int
) -> str:
    """Write ``keyspace`` as the snapshot at ``lsn`` and drop all but the newest
    :data:`KEEP_SNAPSHOTS`; returns the file's path."""
    lines = [state_image(db, key, entry) for db, key, entry in keyspace.items()]
    header = orjson.dumps(
        {"format": FORMAT, "version": VERSION, "shard": shard, "lsn": lsn, "keys": len(lines),
         "created_us": created_us}
    )  # fmt: skip
    body = b"\n".join([header, *lines]) + b"\n"
    trailer = b'{"crc32c":%d}\n' % crc32c.crc32c(body)
    path = snapshot_path(shard_dir, lsn)
    replace_atomically(path, [body, trailer])
    for old in list_snapshots(shard_dir)[:-KEEP_SNAPSHOTS]:
        os.unlink(snapshot_path(shard_dir, old))
    return path


def read_snapshot(path: str) -> Snapshot:
    """Read and verify a snapshot file.

    Raises:
        CorruptionError: wrong format, bad CRC or a key count that does not match (path and
            byte offset in the error).
        UnsupportedFormatError: a version this build does not read.
    """
    with open(path, "rb") as file:
        data = file.read()
    end = data.rfind(b"\n", 0, len(data) - 1) + 1
    try:
        expected = orjson.loads(data[end:])["crc32c"]
        header = orjson.loads(data[: data.index(b"\n")])
        if header["format"] != FORMAT:
            raise ValueError(f"format {header['format']!r}")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptionError(f"not a moonish snapshot: {exc}", path=path, offset=0) from None
    if header["version"] != VERSION:
        raise UnsupportedFormatError(f"snapshot version {header['version']}", path=path)
    if crc32c.crc32c(data[:end]) != expected:
        raise CorruptionError("snapshot CRC mismatch", path=path, offset=end)
    images = data[:end].split(b"\n")[1:-1]
    if len(images) != header["keys"]:
        raise CorruptionError(
            f"snapshot has {len(images)} keys, its header says {header['keys']}", path=path
        )
    return Snapshot(path, header["shard"], header["lsn"], header["created_us"], images)
