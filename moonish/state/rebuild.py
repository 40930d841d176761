"""Rebuilding a shard's keyspace and function libraries from its newest usable snapshot and
the records after it (moonish.log.payloads: ``kv_change`` ``replay``; ``message`` records with
prefix ``moonish.function``, moonish.state.libraries).

Records are replayed at their commit time (relative TTLs, stream IDs). A ``moonish.filtered``
message (:data:`FILTERED_PREFIX`: a command whose changes a source filter's
``exclude_commands`` left out of the stream, its part in this shard as RESP) is run again on
the keyspace, as the writer ran it. Other message prefixes (``moonish.skipped``) and
checkpoints change nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import hiredis
import orjson

from moonish.errors import (
    CommandError,
    CorruptionError,
    LsnDiscardedError,
    LsnNotRetainedError,
    UnsupportedFormatError,
)
from moonish.log.format import RecordType
from moonish.log.payloads import decode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import KvChange, Message, Replay
from moonish.log.segment import segment_holding
from moonish.state.commands.execute import execute
from moonish.state.keyspace import Access, Keyspace
from moonish.state.libraries import PREFIX, Libraries, apply_message, libraries_from_lines
from moonish.state.snapshot import list_snapshots, read_snapshot, snapshot_path
from moonish.values.model import entry_from_image

FILTERED_PREFIX: Final = "moonish.filtered"
"""The message that stands in a shard's log for a command whose changes the stream leaves
out (a source filter's ``exclude_commands``): the command's part in the shard, as RESP."""

REPLAY_BATCH_RECORDS = 4096


Progress = Callable[[int, int], None]
"""Called with (the LSN the keyspace is rebuilt up to, the last LSN) once the snapshot is
loaded and after every batch of :data:`REPLAY_BATCH_RECORDS` records replayed; it may raise
to stop the rebuild (the exception goes to the caller)."""


def rebuild(
    shard_dir: str,
    last_lsn: int,
    keyspace: Keyspace,
    libraries: Libraries,
    progress: Progress | None = None,
) -> bytes:
    """Fill the empty ``keyspace`` and ``libraries`` with the state at ``last_lsn``: the
    newest snapshot at or below it, then the records after the snapshot. Returns the source
    position at ``last_lsn`` (the last one a record or the snapshot carried; ``b""``: none).
    ``progress``: see :data:`Progress`.

    Raises:
        CorruptionError: the snapshot or a record is damaged, a record does not replay, or
            records the state needs were removed without a snapshot covering them.
        UnsupportedFormatError: the shard holds plain kv records, or a snapshot of a version
            this build does not read.
    """
    usable = [lsn for lsn in list_snapshots(shard_dir) if lsn <= last_lsn]
    start, source = 1, b""
    if usable:
        snapshot = read_snapshot(snapshot_path(shard_dir, usable[-1]))
        for line in snapshot.images:
            db, key, entry = entry_from_image(orjson.loads(line))
            keyspace.put(db, key, entry)
        try:
            libraries.update(libraries_from_lines(snapshot.libraries))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptionError(
                f"bad library line in snapshot: {exc!r}", path=snapshot.path
            ) from None
        start, source = snapshot.lsn + 1, snapshot.source
    if progress is not None:
        progress(start - 1, last_lsn)
    if start > last_lsn:
        return source
    reader = ShardReader(shard_dir)
    try:
        _seek(reader, shard_dir, start)
        while True:
            try:
                frames = reader.poll(REPLAY_BATCH_RECORDS)
            except LsnDiscardedError as exc:  # cut out by `wal repair`: gone from the log
                _seek(reader, shard_dir, exc.oldest_lsn)
                continue
            if not frames:
                break
            for frame in frames:
                source = (
                    replay_record(
                        shard_dir,
                        keyspace,
                        libraries,
                        frame.lsn,
                        frame.record_type,
                        frame.payload,
                        frame.commit_us,
                    )
                    or source
                )
            if progress is not None:
                progress(frames[-1].lsn, last_lsn)
    finally:
        reader.close()
    return source


def _seek(reader: ShardReader, shard_dir: str, lsn: int) -> None:
    """Position the replay at ``lsn``; past LSNs a repair discarded (the keyspace then
    holds what the log holds: the discarded records' changes are lost with them)."""
    try:
        reader.seek(lsn)
    except LsnDiscardedError as exc:
        reader.seek(exc.oldest_lsn)
    except LsnNotRetainedError as exc:
        raise CorruptionError(
            f"cannot rebuild the keyspace: records {lsn}..{exc.oldest_lsn - 1} were "
            "removed and no snapshot covers them",
            path=shard_dir,
            lsn=lsn,
        ) from None


def replay_record(
    shard_dir: str,
    keyspace: Keyspace,
    libraries: Libraries,
    lsn: int,
    record_type: int,
    payload: bytes,
    commit_us: int,
) -> bytes:
    """Apply one record to ``keyspace`` and ``libraries``; returns the source position it
    carries (``b""``: none).

    Raises:
        UnsupportedFormatError: a plain kv record (written without keyspace tracking).
        CorruptionError: the record does not replay (its segment and LSN named).
    """
    if record_type == RecordType.KV:
        raise UnsupportedFormatError(
            "this shard holds plain kv records (written without keyspace tracking); "
            "a keyspace cannot be rebuilt from them: import into a new data directory",
            path=shard_dir,
            lsn=lsn,
        )
    if record_type not in (RecordType.KV_CHANGE, RecordType.MESSAGE):
        return b""
    try:
        record = decode_payload(record_type, payload)
        if isinstance(record, Message):
            if record.prefix == PREFIX:
                apply_message(libraries, record.content)
            elif record.prefix == FILTERED_PREFIX:
                acc = Access(lambda key: keyspace, commit_us // 1000, expire=False)
                acc.keyspaces = [keyspace]
                execute(acc, record.db, _command(record.content))
            return record.source
        assert isinstance(record, KvChange)
        if record.replay is Replay.COMMAND:
            acc = Access(lambda key: keyspace, commit_us // 1000, expire=not record.loading)
            acc.keyspaces = [keyspace]
            execute(acc, record.db, list(record.argv))
        elif record.replay is Replay.STATE:
            if record.state:
                db, key, entry = entry_from_image(orjson.loads(record.state))
                keyspace.put(db, key, entry)
            else:
                keyspace.remove(record.db, record.key)
        return record.source
    except (CommandError, ValueError, KeyError, TypeError) as exc:
        raise CorruptionError(
            f"record does not replay: {exc}", path=segment_holding(shard_dir, lsn), lsn=lsn
        ) from None


def _command(resp: bytes) -> list[bytes]:
    """The command a :data:`FILTERED_PREFIX` message holds (a RESP array of bulk strings).

    Raises:
        ValueError: anything else (the caller reports it as a record that does not replay).
    """
    reader = hiredis.Reader()
    reader.feed(resp)
    argv = reader.gets()
    if not isinstance(argv, list) or not argv or not all(isinstance(a, bytes) for a in argv):
        raise ValueError(f"a {FILTERED_PREFIX} message that is no command: {resp[:80]!r}")
    return argv
