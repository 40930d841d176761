"""A data directory's shards as moonish.datadir sees them, and the locks that named consumers
(moonish.datadir.consumers) and retention (moonish.datadir.retention) share.

A data directory holds ``shard-<k>`` directories numbered from 0; a shard directory given
where a data directory is expected is a data directory of one shard. Its consumers live in
``<data_dir>/consumers/``, a directory that every listing of a shard ignores (segment,
index and snapshot names are 16 hex digits and a suffix).

``<shard_dir>/RETENTION.lock`` orders retention against positions that move back: held
exclusive while retention plans and deletes a shard's segments, shared while ``consumer
create`` or ``consumer seek`` check that a position is retained and store it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator, Sequence

from moonish.errors import InvalidArgumentError, LsnDiscardedError, LsnNotRetainedError
from moonish.log.reader import ShardReader
from moonish.log.segment import require_shard_dir

RETENTION_LOCK = "RETENTION.lock"
SHARD_NAME = re.compile(r"shard-(0|[1-9][0-9]*)")


def shard_dirs(data_dir: str | os.PathLike[str]) -> list[str]:
    """The shard directories of ``data_dir`` in token order, or ``[data_dir]`` when it is a
    shard directory (the rule of moonish.cdc.positions.data_shards, which moonish.datadir
    cannot import).

    Raises:
        InvalidArgumentError: not an existing directory, shard numbers that do not run
            0..N-1, or a shard without a log.
    """
    root = os.fspath(data_dir)
    if not os.path.isdir(root):
        raise InvalidArgumentError("directory does not exist or is not a directory", path=root)
    names = [name for name in os.listdir(root) if name.startswith("shard-")]
    if not names:
        return [require_shard_dir(root)]
    numbers = sorted(int(name[6:]) for name in names if SHARD_NAME.fullmatch(name))
    if len(numbers) != len(names) or numbers != list(range(len(numbers))):
        raise InvalidArgumentError("shard directories must be shard-0 .. shard-<N-1>", path=root)
    return [require_shard_dir(os.path.join(root, f"shard-{k}")) for k in numbers]


def roots_of_shard(shard_dir: str) -> list[tuple[str, int]]:
    """Where consumers of ``shard_dir`` can be registered: ``(data_dir, component)`` for the
    shard itself (component 0) and, for ``shard-<k>``, its parent data directory (``k``)."""
    roots = [(shard_dir, 0)]
    parent, base = os.path.split(os.path.abspath(shard_dir))
    if SHARD_NAME.fullmatch(base):
        roots.append((parent, int(base[6:])))
    return roots


# -- locks and positions ------------------------------------------------------------------


@contextlib.contextmanager
def flock(path: str, exclusive: bool = True) -> Iterator[None]:
    """Hold ``flock`` on ``path`` (created if missing). The lock is on the file under the
    name after locking: a lock file removed meanwhile (``drop``) is opened again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def retention_lock(shard_dirs_: Sequence[str], exclusive: bool) -> Iterator[None]:
    """Hold the retention lock of every shard in ``shard_dirs_`` (in the order given, which
    callers keep as token order): exclusive to delete segments, shared to set positions."""
    with contextlib.ExitStack() as stack:
        for shard in shard_dirs_:
            stack.enter_context(flock(os.path.join(shard, RETENTION_LOCK), exclusive))
        yield


def check_count(shards: Sequence[str], positions: Sequence[int], data_dir: str) -> None:
    if len(positions) != len(shards):
        raise InvalidArgumentError(
            f"a position of {len(positions)} shards for a data directory of {len(shards)} shards",
            path=data_dir,
        )
    if any(not 0 <= p < 2**64 for p in positions):
        raise InvalidArgumentError(f"positions are LSNs in [0, 2**64), got {list(positions)}")


def check_position(shard_dir: str, position: int, *, retained: bool) -> None:
    """Whether ``position`` is at most the shard's last LSN (and, with ``retained``, whether
    every change after it is still there).

    Raises:
        InvalidArgumentError: beyond the end of the log.
        LsnNotRetainedError: (with ``retained``) changes after it are no longer retained.
    """
    reader = ShardReader(shard_dir)
    try:
        reader.seek(position + 1)
    except LsnDiscardedError:
        pass  # a range a repair cut out: readers continue after it
    except LsnNotRetainedError:
        if retained:
            raise
    except InvalidArgumentError:  # beyond the end: say so in terms of positions
        reader.seek_end()
        raise InvalidArgumentError(
            f"position {position} is beyond the end of the log: its last LSN is "
            f"{reader.next_lsn - 1}",
            path=shard_dir,
        ) from None
    finally:
        reader.close()


def oldest_lsn(shard_dir: str) -> int:
    """The oldest LSN the shard still holds (its next LSN when it holds none)."""
    reader = ShardReader(shard_dir)
    try:
        reader.seek(1)
    except LsnNotRetainedError as error:
        return error.oldest_lsn
    finally:
        reader.close()
    return 1
