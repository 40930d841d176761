"""Checking a whole shard (``moonish wal verify``) and describing its records (``wal dump``)."""

from __future__ import annotations

import bisect
import datetime
import os
from collections.abc import Iterator
from dataclasses import dataclass

from moonish.errors import CorruptionError
from moonish.log.control import Control, control_path, load_control
from moonish.log.format import (
    FRAME_HEADER_BYTES,
    FRAME_TRAILER_BYTES,
    INDEX_ENTRY,
    SEGMENT_HEADER_BYTES,
    RecordType,
    segment_name,
)
from moonish.log.frames import LAYOUTS, Frame, is_torn_tail, scan_frames
from moonish.log.heartbeat import heard_lsn
from moonish.log.payloads import decode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import (
    Checkpoint,
    GraphMutation,
    KvChange,
    KvCommand,
    Message,
    PayloadError,
    Record,
    Replay,
    TemporalUpsert,
)
from moonish.log.recovery import check_snapshots
from moonish.log.segment import (
    decode_segment_header,
    index_path,
    list_segments,
    read_index,
    require_shard_dir,
    segment_path,
)
from moonish.log.used import highest_indexed_lsn, highest_named_lsn

SCAN_BATCH_RECORDS = 65536
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """A sound shard: what was checked."""

    shard_dir: str
    shard: int | None
    segments: int
    records: int
    first_lsn: int | None
    last_lsn: int | None
    bytes: int
    index_entries: int
    torn_tail_bytes: int
    """Bytes of torn tail after the last committed record (cut off by the next writer)."""
    next_lsn: int
    """The LSN the next writer appends (after any discarded range and after the LSNs the torn
    tail names; control.json's when the shard holds no segment)."""
    discarded: tuple[tuple[int, int], ...]
    """LSN ranges cut out (control.json): by ``moonish wal repair``, or as torn tails."""
    torn_tail_lsns: tuple[int, int] | None = None
    """The LSNs ``(first, last)`` past the last committed record that the torn tail's frame
    headers, index entries or the last heartbeat name, which the next writer records as
    discarded when it cuts the tail (``None``: none)."""


def verify_shard(shard_dir: str | os.PathLike[str]) -> VerifyReport:
    """Check every segment of a shard: headers, frame CRCs, LSN continuity within and across
    segments (a gap only where control.json records a repair discarded it), batch framing,
    payload grammar, the sparse index entries, and that the log reaches the end control.json
    and the snapshots say it had reached.

    A torn tail at the end of the newest segment is not damage (it is the normal end of a log
    whose writer died: the rule is moonish.log.frames, ``is_torn_tail``); it is reported in
    ``torn_tail_bytes``, and the LSNs its frame headers name (the next writer discards them,
    moonish.log.used) in ``torn_tail_lsns``.

    Raises:
        InvalidArgumentError: not an existing shard directory.
        CorruptionError: the first damage found, with file, byte offset and LSN.
        UnsupportedFormatError: a segment of a format version this build does not read.
    """
    path = require_shard_dir(shard_dir)
    bases = list_segments(path)
    control = load_control(path)
    shard: int | None = None
    records = total_bytes = index_entries = torn = 0
    torn_lsns: tuple[int, int] | None = None
    pos = SEGMENT_HEADER_BYTES  # where the previous segment's last record ends
    index_error: CorruptionError | None = None  # raised after the segments: data comes first
    expected = bases[0] if bases else 1
    for number, base in enumerate(bases):
        seg = segment_path(path, base)
        with open(seg, "rb") as handle:
            data = handle.read()
        total_bytes += len(data)
        header = decode_segment_header(data, seg, base)
        if shard is not None and header.shard_id != shard:
            raise CorruptionError(
                f"segment of shard {header.shard_id} in shard {shard}",
                path=seg,
                offset=12,
                lsn=base,
            )
        shard = header.shard_id
        if base != expected and not (
            number and control is not None and control.covers(expected, base - 1)
        ):
            raise CorruptionError(
                f"no segment starts at LSN {expected}: this segment ends at LSN {expected - 1} "
                f"and the next one starts at LSN {base}",
                path=segment_path(path, bases[number - 1]),
                offset=pos,
                lsn=expected,
            )
        offsets: dict[int, int] = {}
        layout = LAYOUTS[header.version]
        pos, lsn = SEGMENT_HEADER_BYTES, base
        while True:
            frames, end, stop = scan_frames(data, pos, lsn, SCAN_BATCH_RECORDS, layout=layout)
            for frame in frames:
                _decode(frame, seg)
                offsets[frame.lsn] = frame.offset
            records += len(frames)
            pos, lsn = end, lsn + len(frames)
            if stop is not None:
                torn_like = is_torn_tail(data[pos:], lsn, layout, pos)
                if number < len(bases) - 1 or not torn_like:
                    sealed = " in a sealed segment (a newer one exists)" if torn_like else ""
                    raise CorruptionError(
                        stop.describe() + sealed, path=seg, offset=stop.offset, lsn=stop.lsn
                    )
                torn = len(data) - pos
                break
            if pos == len(data):
                break
        newest = number == len(bases) - 1
        if newest:  # what the next writer discards: LSNs frames or entries name past the end
            named = max(
                highest_named_lsn(data, pos, lsn, base, layout),
                highest_indexed_lsn(path, base, pos),
                heard_lsn(path, control, lsn),
            )
            torn_lsns = (lsn, named) if named >= lsn else None
        checked, wrong = _check_index(path, base, offsets, pos if newest else None)
        index_entries += checked
        index_error = index_error or wrong
        expected = lsn
    log_end = (segment_path(path, bases[-1]), pos) if bases else None
    next_lsn = _check_end(path, expected if bases else None, control, log_end)
    if torn_lsns is not None:
        next_lsn = max(next_lsn, torn_lsns[1] + 1)
    if index_error is not None:
        raise index_error
    return VerifyReport(
        path,
        shard,
        len(bases),
        records,
        bases[0] if records else None,
        expected - 1 if records else None,
        total_bytes,
        index_entries,
        torn,
        next_lsn,
        control.discarded if control is not None else (),
        torn_lsns,
    )


def _check_index(
    shard_dir: str, base: int, offsets: dict[int, int], torn_from: int | None
) -> tuple[int, CorruptionError | None]:
    """``(entries checked, the first wrong entry as an error or None)`` for the index of the
    segment ``base`` whose records start at ``offsets`` (LSN -> offset). ``torn_from``: in the
    newest segment, where its torn tail starts (entries into it are dropped by the next
    writer, not damage)."""
    path = index_path(shard_dir, base)
    entries = read_index(path)
    if torn_from is not None:  # the last entries may point into the tail the writer cuts
        while entries and entries[-1][1] >= torn_from:
            entries.pop()
    checked = 0
    for number, (entry_lsn, entry_offset) in enumerate(entries):
        if offsets.get(entry_lsn) != entry_offset:
            return checked, CorruptionError(
                f"index entry says LSN {entry_lsn} is at offset {entry_offset} of "
                f"{segment_name(base)}, but it is not",
                path=path,
                offset=number * INDEX_ENTRY.size,
                lsn=entry_lsn,
            )
        checked += 1
    return checked, None


def _check_end(
    path: str, log_end: int | None, control: Control | None, newest: tuple[str, int] | None
) -> int:
    """The next LSN, checked against control.json and the snapshots (``log_end``: the LSN
    after the last record of the segments, ``None`` when there is none; ``newest``: the newest
    segment's path and where its last record ends, named when records were lost there)."""
    if log_end is None:
        return control.next_lsn if control is not None else 1
    next_lsn = log_end
    if control is not None and control.next_lsn > log_end:
        if not control.covers(log_end, control.next_lsn - 1):
            seg, end = newest or (control_path(path), None)
            raise CorruptionError(
                f"the log ends at LSN {log_end - 1}, but control.json says it had reached LSN "
                f"{control.next_lsn - 1}: records were lost from its end (a truncated or "
                "removed newest segment)",
                path=seg,
                offset=end,
                lsn=log_end,
            )
        next_lsn = control.next_lsn
    check_snapshots(path, next_lsn)
    return next_lsn


def _decode(frame: Frame, path: str) -> Record:
    try:
        return decode_payload(frame.record_type, frame.payload)
    except PayloadError as exc:
        raise CorruptionError(
            f"undecodable payload: {exc}", path=path, offset=frame.offset, lsn=frame.lsn
        ) from None


def _show(value: bytes) -> str:
    text = value.decode("utf-8", "backslashreplace")
    return text if text and not any(c.isspace() for c in text) else repr(text)


def describe(record: Record) -> str:
    """A one-line human-readable rendering of a record (the tail of a dump line)."""
    if isinstance(record, KvCommand):
        return f"db: {record.db}, {' '.join(_show(arg) for arg in record.argv)}" + (
            f" (key: {_show(record.argv[record.key_pos])})" if record.key_pos > 1 else ""
        )
    if isinstance(record, TemporalUpsert):
        return (
            f"key: {_show(record.key)}, value: {_show(record.value)}, "
            f"valid_from_ms: {record.valid_from_ms}, system_from_ms: {record.system_from_ms}"
        )
    if isinstance(record, GraphMutation):
        return (
            f"{record.entity_kind.name.lower()}: {_show(record.entity_id)}, valid_to_ms: "
            f"{record.valid_to_ms}, system_from_ms: {record.system_from_ms}, "
            f"properties: {_show(record.properties)}"
        )
    if isinstance(record, KvChange):
        flags = "".join(
            f", {name}"
            for name, on in (("expired", record.expired), ("loading", record.loading))
            if on
        )
        replay = f", replay: {' '.join(map(_show, record.argv))}" if record.argv else ""
        replay = ", replay: by value" if record.replay is Replay.STATE else replay
        return (
            f"op: {record.op}, db: {record.db}, key: {_show(record.key)}, "
            f"command: {_show(record.command)}, view: {record.view.name}{flags}{replay}"
        )
    if isinstance(record, Message):
        return f"prefix: {record.prefix!r}, db: {record.db}, content: {_show(record.content)}"
    assert isinstance(record, Checkpoint)
    return f"checkpoint_lsn: {record.checkpoint_lsn}, label: {record.label!r}"


def _frame_overhead(seg: str, base: int) -> int:
    """Bytes of a frame of segment ``seg`` besides its payload (header, and trailer in v2)."""
    with open(seg, "rb") as handle:
        version = decode_segment_header(handle.read(SEGMENT_HEADER_BYTES), seg, base).version
    layout = LAYOUTS[version]
    return FRAME_HEADER_BYTES + (FRAME_TRAILER_BYTES if layout.trailer else 0)


def dump_lines(
    shard_dir: str | os.PathLike[str], from_lsn: int = 0, limit: int | None = None
) -> Iterator[str]:
    """Lines describing each record from ``from_lsn`` (like pg_waldump), in LSN order::

        lsn: 7, segment: 0000000000000001.seg, offset: 412, bytes: 67, type: kv, batch: 1/2,
        commit: 2026-11-21T12:00:00.000001Z, db: 0, DEL k1

    (one line per record). Raises as ``ShardReader.seek``/``poll`` and ``CorruptionError`` for
    an undecodable payload.
    """
    reader = ShardReader(shard_dir)
    bases: list[int] = []
    overheads: dict[int, int] = {}  # frame bytes besides the payload, by segment
    try:
        reader.seek(from_lsn)
        remaining = limit
        while remaining is None or remaining > 0:
            frames = reader.poll(min(remaining or SCAN_BATCH_RECORDS, SCAN_BATCH_RECORDS))
            if not frames:
                return
            if not bases or frames[-1].lsn >= bases[-1]:
                bases = list_segments(reader.shard_dir)
            for frame in frames:
                base = bases[bisect.bisect_right(bases, frame.lsn) - 1]
                seg = segment_path(reader.shard_dir, base)
                if base not in overheads:
                    overheads[base] = _frame_overhead(seg, base)
                record = _decode(frame, seg)
                commit = EPOCH + datetime.timedelta(microseconds=frame.commit_us)  # exact, no float
                yield (
                    f"lsn: {frame.lsn}, segment: {segment_name(base)}, offset: {frame.offset}, "
                    f"bytes: {overheads[base] + len(frame.payload)}, "
                    f"type: {RecordType(frame.record_type).name.lower()}, "
                    f"batch: {frame.batch_index + 1}/{frame.batch_size}, "
                    f"commit: {commit.isoformat().replace('+00:00', 'Z')}, {describe(record)}"
                )
            if remaining is not None:
                remaining -= len(frames)
    finally:
        reader.close()
