"""The shard's writer lock: one writer (or repair, or import) per shard at a time."""

from __future__ import annotations

import fcntl
import os

from moonish.errors import WriterLockedError
from moonish.log.format import LOCK_NAME


def lock_shard(shard_dir: str) -> int:
    """Take the shard's writer lock (``flock`` on ``<shard_dir>/LOCK``, which then holds
    ``pid=<n>``); returns the lock file's descriptor: closing it releases the lock.

    Raises:
        WriterLockedError: another writer (or a repair) holds it.
    """
    path = os.path.join(shard_dir, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        os.close(fd)
        raise WriterLockedError(path, holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid={os.getpid()}\n".encode(), 0)
    return fd
