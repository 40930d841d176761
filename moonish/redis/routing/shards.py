"""Opening the shards of a data directory for an import, and removing what a failed import
created: a failed import that wrote nothing leaves nothing behind."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial

from moonish.clock import Clock
from moonish.errors import MoonishError, UnavailableError
from moonish.log.format import CONTROL_NAME, LOCK_NAME, SEGMENT_HEADER_BYTES
from moonish.log.heartbeat import HEARTBEAT_NAME
from moonish.log.lock import lock_shard
from moonish.log.segment import index_path, list_segments, segment_path
from moonish.log.writer import WriterOptions
from moonish.redis.routing.filterfile import FILTER_NAME, FilterFile
from moonish.redis.routing.keyfilter import NO_FILTER, FilterSpec
from moonish.redis.routing.sources import SOURCE_NAME, check_source, remember_source, unknown_source
from moonish.redis.routing.target import check_descriptors
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.config import CONFIG_NAME, StreamConfig
from moonish.state.shard import ShardOptions, ShardWriter


@dataclass
class OpenShards:
    """The writers of every shard, and what opening them created (for :func:`undo_create`).

    Attributes:
        writers: one per shard, in shard order.
        new_dirs: shard directories that did not exist before.
        created: directories created for the data directory (it and missing parents), the
            deepest first.
        existed: whether any shard directory existed before.
        data_dir: the data directory.
        filter: the source filter checked against the data directory's (``None`` until
            :func:`source_shards` checked it).
    """

    writers: list[ShardWriter]
    new_dirs: list[str]
    created: list[str]
    data_dir: str = ""
    filter: FilterFile | None = None

    @property
    def existed(self) -> bool:
        return len(self.new_dirs) < len(self.writers)


@contextlib.contextmanager
def source_shards(
    data_dir: str,
    shards: int,
    kind: str,
    location: str,
    log: WriterOptions,
    stream: StreamConfig,
    clock: Clock,
    snapshots: SnapshotPolicy | None = None,
    on_recovery: Callable[[str, int, int], None] | None = None,
    rebuild: bool = True,
    key_filter: FilterSpec = NO_FILTER,
    retention: Mapping[str, int] | None = None,
) -> Iterator[OpenShards]:
    """The shards of ``data_dir`` opened to receive changes from the source ``kind`` at
    ``location`` (moonish.redis.routing.sources), for the ``with`` block; closed after it.

    Before anything is created: the source is checked against ``source.json`` and the
    open-file limit raised if it must be. A data directory that remembers no source gets
    ``source.json``, unless its shards already hold records (written without positions). If
    the block raises before any record was written to shards this call created, what it
    created is removed again (:func:`undo_create`): a failed import leaves nothing behind.
    ``key_filter`` is checked against the data directory's ``filter.json`` and stored there
    when the shards hold no record yet (moonish.redis.routing.filterfile); ``opened.filter``
    holds it. ``retention``: rules of every shard's retention policy to set (the others keep
    their stored values; ``RetentionPolicy``'s field names).

    Raises:
        SourceMismatchError: another source, or records without a source.
        FilterMismatchError: another filter than the data directory's.
        InvalidArgumentError, UnavailableError, WriterLockedError: as :func:`open_shards`
            and ``check_descriptors``.
    """
    remembered = check_source(data_dir, kind, location)
    filtered_before = os.path.exists(os.path.join(data_dir, FILTER_NAME))
    check_descriptors(shards, raise_soft=True)
    opened = open_shards(data_dir, shards, log, stream, clock, snapshots, on_recovery, rebuild)
    try:
        if not remembered:
            if any(writer.next_lsn > 1 for writer in opened.writers):
                raise unknown_source(data_dir, kind, location)
            remember_source(data_dir, kind, location)
        fresh = all(writer.next_lsn == 1 for writer in opened.writers)
        if retention:
            for writer in opened.writers:
                policy = replace(writer.stream.retention, **retention)
                if policy != writer.stream.retention:
                    writer.set_retention(policy)
        opened.filter = FilterFile(data_dir, key_filter, fresh)
        yield opened
    except BaseException:
        if not opened.existed and not any(map(_holds_records, opened.writers)):
            undo_create(opened, data_dir, remove_source=not remembered)
            if opened.filter is not None and not filtered_before:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(data_dir, FILTER_NAME))
        raise
    finally:
        for writer in opened.writers:
            writer.close()


def _holds_records(writer: ShardWriter) -> bool:
    """Whether the shard's log holds a record: appended by ``writer``, or, when another
    process wrote the shard (a parallel import's worker), in its segment files."""
    if writer.next_lsn > 1:
        return True
    shard_dir = writer.shard_dir
    try:
        return any(
            os.path.getsize(segment_path(shard_dir, base)) > SEGMENT_HEADER_BYTES
            for base in list_segments(shard_dir)
        )
    except OSError:
        return False


def open_shard(
    data_dir: str,
    shard: int,
    log: WriterOptions,
    stream: StreamConfig,
    clock: Clock,
    snapshots: SnapshotPolicy | None = None,
    on_recovery: Callable[[str, int, int], None] | None = None,
    rebuild: bool = True,
) -> ShardWriter:
    """The writer of ``data_dir/shard-<shard>`` as imports and captures open it: ``log``'s
    options with its shard id, ``stream`` if it is new, no expiry sweep thread, snapshots by
    ``snapshots`` (``None``: the default policy); ``on_recovery`` is called with (the shard
    directory, the LSN rebuilt up to, the last LSN) as ``ShardOptions.on_recovery`` is;
    ``rebuild`` as ``ShardOptions.rebuild`` (``False``: to check or create the shard for
    worker processes that open it again).

    Raises:
        As :class:`ShardWriter`.
    """
    shard_dir = os.path.join(data_dir, f"shard-{shard}")
    options = ShardOptions(
        replace(log, shard_id=shard),
        stream,
        expiry_sweep_ms=0,
        snapshots=snapshots or SnapshotPolicy(),
        on_recovery=None if on_recovery is None else partial(on_recovery, shard_dir),
        rebuild=rebuild,
    )
    return ShardWriter(shard_dir, options, clock)


def open_shards(
    out_dir: str,
    shards: int,
    log: WriterOptions,
    stream: StreamConfig,
    clock: Clock,
    snapshots: SnapshotPolicy | None = None,
    on_recovery: Callable[[str, int, int], None] | None = None,
    rebuild: bool = True,
) -> OpenShards:
    """A writer per shard, with ``log``'s options and its shard id. If one cannot be opened,
    the others are closed, what this call created is removed again and the error is
    raised, an ``OSError`` as :class:`UnavailableError`."""
    created = []  # directories this call creates: the data directory and missing parents
    missing = os.path.abspath(out_dir)
    while not os.path.lexists(missing):
        created.append(missing)
        missing = os.path.dirname(missing)
    shard_dirs = [os.path.join(out_dir, f"shard-{shard}") for shard in range(shards)]
    new = {path for path in shard_dirs if not os.path.lexists(path)}
    writers: list[ShardWriter] = []
    try:
        for shard, shard_dir in enumerate(shard_dirs):
            try:
                writers.append(
                    open_shard(out_dir, shard, log, stream, clock, snapshots, on_recovery, rebuild)
                )
            except OSError as exc:
                raise _open_error(exc, shard, shards, shard_dir) from exc
    except BaseException:
        for writer in writers:
            writer.close()
        tried = shard_dirs[: len(writers) + 1]
        _remove_created([path for path in tried if path in new], created)
        raise
    return OpenShards(writers, [path for path in shard_dirs if path in new], created, out_dir)


def undo_create(opened: OpenShards, data_dir: str, *, remove_source: bool) -> None:
    """After a failed import that wrote no record: close the writers, then remove the shard
    directories and data directory the import created, and ``source.json`` with
    ``remove_source`` (the import wrote it). Best effort: a directory holding anything but
    what a new shard holds is left alone."""
    for writer in opened.writers:
        writer.close()
    if remove_source:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(data_dir, SOURCE_NAME))
    _remove_created(opened.new_dirs, opened.created)


def _open_error(exc: OSError, shard: int, shards: int, shard_dir: str) -> UnavailableError:
    path = exc.filename if isinstance(exc.filename, str) else shard_dir
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return UnavailableError(
            f"cannot open shard {shard} of {shards}: {reason}; nothing was imported (raise "
            "the open-file limit, ulimit -n, or import into fewer shards)",
            path=path,
        )
    return UnavailableError(
        f"cannot open shard {shard} of {shards}: {reason}; nothing was imported", path=path
    )


def _remove_created(shard_dirs: list[str], created: list[str]) -> None:
    """Best effort: remove ``shard_dirs`` (created by this import) when they hold nothing but
    what opening a new shard writes, under the shard's lock, then the directories in
    ``created`` (deepest first) that are empty."""
    for shard_dir in reversed(shard_dirs):
        try:
            lock_fd = lock_shard(shard_dir)
        except (MoonishError, OSError):
            lock_fd = -1  # gone, never made, or another writer has it: leave it alone
        if lock_fd >= 0:
            try:
                names = os.listdir(shard_dir)
                if all(_fresh(shard_dir, name) for name in names):
                    for name in sorted(names, key=lambda name: name == LOCK_NAME):
                        os.unlink(os.path.join(shard_dir, name))
            except OSError:
                pass
            finally:
                os.close(lock_fd)
        _rmdir(shard_dir)
    for directory in created:
        _rmdir(directory)


def _fresh(shard_dir: str, name: str) -> bool:
    """Whether ``name`` in ``shard_dir`` is a file a new, empty shard holds."""
    if name in (LOCK_NAME, CONTROL_NAME, CONFIG_NAME, HEARTBEAT_NAME) or name.endswith(".tmp"):
        return True
    try:
        if name == os.path.basename(segment_path(shard_dir, 1)):
            return os.path.getsize(os.path.join(shard_dir, name)) <= SEGMENT_HEADER_BYTES
        if name == os.path.basename(index_path(shard_dir, 1)):
            return os.path.getsize(os.path.join(shard_dir, name)) == 0
    except OSError:
        return False
    return False


def _rmdir(path: str) -> None:
    with contextlib.suppress(OSError):  # not empty (someone else's files), or already gone
        os.rmdir(path)
