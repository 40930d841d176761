"""Reading a shard's newest snapshot as ``op: "r"`` rows, for consumers that start with the
whole keyspace and then follow the log (Debezium's initial snapshot; SlateDB's backfill then
tail).

The rows of the snapshot at LSN ``L`` are the keys live after record ``L``, by db then key
bytes; the log continues at ``L + 1``. So rows then changes from ``L + 1`` hold every change
once, with no gap and no overlap, even when the segments before ``L + 1`` were removed.
"""

from __future__ import annotations

import orjson

from moonish.cdc.cursor import Cursor
from moonish.cdc.envelope import FLAG_SNAPSHOT
from moonish.errors import InvalidArgumentError, LsnNotRetainedError
from moonish.log.format import RecordType
from moonish.log.frames import Frame
from moonish.log.payloads import encode_payload
from moonish.log.records import KvChange, ViewType
from moonish.state.config import StreamConfig, load_config
from moonish.state.snapshot import list_snapshots, read_snapshot, snapshot_path
from moonish.values.model import entry_from_image, full_image, key_image


def start_cursor(shard_dir: str) -> Cursor:
    """The cursor of a new consumer that wants the snapshot first: the first row of the
    newest snapshot, or LSN 0 when the shard has none (the log then holds everything)."""
    snapshots = list_snapshots(shard_dir)
    return Cursor(snapshots[-1] + 1, 0) if snapshots else Cursor(0)


def snapshot_frames(shard_dir: str, cursor: Cursor, limit: int) -> tuple[list[Frame], Cursor]:
    """Up to ``limit`` rows of the snapshot ``cursor`` is in, as frames of kv_change rows
    (op ``r``, ``FLAG_SNAPSHOT``, ``batch_index``/``batch_size`` = row / row count), and the
    cursor after them (the plain LSN ``L + 1`` after the last row).

    The ``after`` image follows the shard's view type: the whole value under NEW_IMAGE and
    NEW_AND_OLD_IMAGES, only the key otherwise.

    Raises:
        LsnNotRetainedError: the snapshot was removed (a newer one replaced it); restart from
            the newest with ``snapshot=True``.
        CorruptionError: the snapshot file is damaged.
    """
    assert cursor.snapshot_row is not None
    lsn = cursor.lsn - 1
    try:
        snapshot = read_snapshot(snapshot_path(shard_dir, lsn))
    except FileNotFoundError:
        newest = list_snapshots(shard_dir)
        raise LsnNotRetainedError(lsn, newest[-1] if newest else 0, path=shard_dir) from None
    total = len(snapshot.images)
    if cursor.snapshot_row > total:
        raise InvalidArgumentError(f"the snapshot at LSN {lsn} has {total} rows", path=shard_dir)
    config = load_config(shard_dir) or StreamConfig()
    view = config.view if config.view is not ViewType.OFF else ViewType.KEYS_ONLY
    frames = []
    end = min(cursor.snapshot_row + limit, total)
    for row in range(cursor.snapshot_row, end):
        db, key, entry = entry_from_image(orjson.loads(snapshot.images[row]))
        after = (
            full_image(db, key, entry, config.max_value_bytes)
            if config.new_images
            else key_image(db, key)
        )
        _, payload = encode_payload(KvChange("r", db, b"", key, b"", after, view))
        frames.append(
            Frame(
                lsn,
                RecordType.KV_CHANGE,
                FLAG_SNAPSHOT,
                row,
                total,
                snapshot.created_us,
                payload,
                0,
            )
        )
    return frames, Cursor(lsn + 1, end) if end < total else Cursor(lsn + 1)


def cursor_after(frame: Frame) -> Cursor:
    """Where to resume after ``frame`` (a log record or a snapshot row)."""
    if frame.flags & FLAG_SNAPSHOT:
        row = frame.batch_index + 1
        return Cursor(frame.lsn + 1, row if row < frame.batch_size else None)
    return Cursor(frame.lsn + 1)
