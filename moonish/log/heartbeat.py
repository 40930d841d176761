"""Closed time: a shard's promise about the commit times of records not yet written.

A writer stamps every record with a commit time (``commit_us``, µs since the Unix epoch) that
never decreases within a shard: it takes the clock's time, or the previous record's commit
time, or the closed time below, whichever is latest (a clock that steps back cannot reorder a
shard). So the last record read is already a lower bound for the next one.

That bound does not move while a shard is idle, and a merged stream's resolved watermark
(``moonish.cdc.merged``) is the minimum over its shards. So the writer also *closes time*:
``<shard_dir>/heartbeat.json`` says "every record from ``next_lsn`` on has
``commit_us >= closed_us``", and the writer keeps that promise, also after a restart (it
reads the file when it opens and clamps its commit times to it). The writer rewrites the file
every ``WriterOptions.heartbeat_ms`` (CockroachDB's closed timestamps, Debezium's heartbeat
interval) and when it closes. The file is replaced atomically and fsynced before anyone can
read the promise, so a machine crash cannot take it back.

The file is also evidence of LSNs used (docs/wal-format.md, "LSNs are never reused"): the writer
writes every record below ``next_lsn`` to the segment before it writes the file, so a reader
in another process may have read them all, though a power loss can take them from the
segment (the heartbeat is fsynced, the records only by the fsync policy). Where the log ends
below the heartbeat's ``next_lsn``, :func:`heard_lsn` names the LSNs in between; the writer's
torn-tail cut (moonish.log.recovery), ``wal verify`` and ``wal repair`` count them as used.

File (JSON, with a crc32c as in ``moonish.fileio``)::

    {"format": "moonish-heartbeat", "version": 1, "shard": 0, "next_lsn": 1235,
     "closed_us": 1764000000000000, "crc32c": ...}
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from moonish.errors import CorruptionError, MoonishError
from moonish.fileio import dump_checked, read_checked, replace_atomically
from moonish.log.control import Control
from moonish.log.reader import ShardReader

HEARTBEAT_NAME = "heartbeat.json"
FORMAT, VERSION = "moonish-heartbeat", 1


@dataclass(frozen=True, slots=True)
class ClosedTime:
    """Every record of the shard with LSN >= ``next_lsn`` has ``commit_us >= closed_us``."""

    shard: int
    next_lsn: int
    closed_us: int


def heartbeat_path(shard_dir: str) -> str:
    return os.path.join(shard_dir, HEARTBEAT_NAME)


def load_closed_time(shard_dir: str) -> ClosedTime | None:
    """The shard's closed time, or ``None`` if no writer has written one.

    Raises:
        CorruptionError: the file is damaged (bad checksum or fields).
        UnsupportedFormatError: another format or version.
    """
    path = heartbeat_path(shard_dir)
    document = read_checked(path, FORMAT, VERSION)
    if document is None:
        return None
    try:
        closed = ClosedTime(
            int(document["shard"]), int(document["next_lsn"]), int(document["closed_us"])
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptionError(f"heartbeat.json lacks a field: {error}", path=path) from None
    if closed.next_lsn < 1:
        raise CorruptionError(f"heartbeat.json has next_lsn {closed.next_lsn}", path=path)
    return closed


def closed_floor_us(shard_dir: str) -> int:
    """The closed time a new writer must not go below (0 when there is none or the file is
    unreadable: a damaged promise is replaced by the writer's next heartbeat, and commit
    times still never decrease after the log's last record)."""
    try:
        closed = load_closed_time(shard_dir)
    except MoonishError:
        return 0
    return closed.closed_us if closed is not None else 0


def heard_lsn(shard_dir: str, control: Control | None, log_end: int) -> int:
    """The highest LSN at or after ``log_end`` (the LSN after the log's last record) that the
    last heartbeat published as written, or 0 (:func:`heard_after` of the shard's
    ``heartbeat.json``; a damaged one is no evidence, as it is no promise)."""
    return heard_after(published(shard_dir), control, log_end)


def published(shard_dir: str) -> ClosedTime | None:
    """The shard's last heartbeat, or ``None`` when there is none or it cannot be read."""
    try:
        return load_closed_time(shard_dir)
    except MoonishError:
        return None


def heard_after(closed: ClosedTime | None, control: Control | None, log_end: int) -> int:
    """The highest LSN at or after ``log_end`` that heartbeat ``closed`` names as written (its
    ``next_lsn - 1``), or 0: no heartbeat, one that does not reach ``log_end``, or one whose
    LSNs from ``log_end`` on a range in ``control`` already discards (a repair's, which a
    torn-tail cut must not turn into one a reader passes)."""
    if closed is None or closed.next_lsn <= log_end:
        return 0
    heard = closed.next_lsn - 1
    if control is not None and control.covers(log_end, heard):
        return 0
    return heard


def commit_before(shard_dir: str, lsn: int) -> int:
    """The commit time (µs) of record ``lsn - 1``, 0 if there is none or it cannot be read.
    A writer that reopens a shard whose newest segment is empty (it crashed right after a
    rotation) clamps its commit times to this: the last record is in the older segment.
    (A damaged or removed older segment is for readers to report; the closed time still
    bounds the next commit time then.)"""
    if lsn <= 1:
        return 0
    try:
        with ShardReader(shard_dir) as reader:
            reader.seek(lsn - 1)
            frames = reader.poll(1)
    except MoonishError:
        return 0
    return frames[0].commit_us if frames and frames[0].lsn == lsn - 1 else 0


def store_closed_time(shard_dir: str, closed: ClosedTime) -> None:
    """Replace ``heartbeat.json`` atomically (fsynced, directory too)."""
    document: dict[str, object] = {
        "format": FORMAT,
        "version": VERSION,
        "shard": closed.shard,
        "next_lsn": closed.next_lsn,
        "closed_us": closed.closed_us,
    }
    replace_atomically(heartbeat_path(shard_dir), [dump_checked(document)])
