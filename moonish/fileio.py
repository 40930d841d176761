"""Writing a file so that it appears complete or not at all: temporary name, fsync, rename,
fsync of the directory."""

from __future__ import annotations

import os
from collections.abc import Iterable


def fsync_dir(path: str) -> None:
    """Make a rename or a new file in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: str, chunks: Iterable[bytes]) -> int:
    """Write ``chunks`` to ``path`` through ``.<name>.tmp`` in the same directory; returns
    the bytes written. A crash leaves either the old file or the new one (and maybe a
    stray ``.tmp``, which the next call overwrites)."""
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.tmp")
    written = 0
    with open(temporary, "wb") as out:
        for chunk in chunks:
            out.write(chunk)
            written += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    fsync_dir(directory or ".")
    return written
