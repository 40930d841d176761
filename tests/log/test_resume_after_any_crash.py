"""Property: any appends and batches, any segment size, any crash point -> reading from any
emitted cursor yields exactly the remaining committed records, once each, in order."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moonish.cdc import shard_read
from moonish.log.format import FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES
from moonish.log.records import KvCommand
from moonish.log.segment import index_path, list_segments, read_index, segment_path
from moonish.log.verify import verify_shard
from tests.support.golden import as_if_killed
from tests.support.golden import frame_spans as segment_frame_spans
from tests.support.scale import scaled
from tests.support.wal import open_writer

operations = st.lists(
    st.tuples(st.integers(1, 4), st.binary(min_size=0, max_size=40)), min_size=0, max_size=30
)


def record(i: int, value: bytes) -> KvCommand:
    return KvCommand(i % 3, (b"SET", b"key-%d" % i, value))


def write(path: Path, ops: list[tuple[int, bytes]], segment_bytes: int) -> list[list[int]]:
    """Write ``ops`` (batch size, value); returns the LSNs of each batch."""
    batches = []
    with open_writer(path, segment_bytes=segment_bytes, index_interval_bytes=64) as writer:
        for i, (size, value) in enumerate(ops):
            records = [record(i * 10 + j, value) for j in range(size)]
            batches.append(writer.append(records[0]) if size == 1 else writer.append_batch(records))
    return [b if isinstance(b, list) else [b] for b in batches]


def crash(path: Path, fraction: float) -> int:
    """Cut the newest segment at ``fraction`` of its frame bytes; returns the cut offset."""
    last = segment_path(str(path), list_segments(str(path))[-1])
    size = os.path.getsize(last)
    cut = SEGMENT_HEADER_BYTES + int((size - SEGMENT_HEADER_BYTES) * fraction)
    os.truncate(last, cut)
    as_if_killed(path)
    return cut


def frame_spans(path: Path) -> dict[int, tuple[int, int]]:
    """LSN -> (start, end) byte span of every frame of the newest segment, as written."""
    base = list_segments(str(path))[-1]
    segment = Path(segment_path(str(path), base))
    return dict(enumerate(segment_frame_spans(segment), start=base))


def committed(batches: list[list[int]], spans: dict[int, tuple[int, int]], cut: int) -> list[int]:
    """LSNs that survive a cut of the newest segment at ``cut``: whole batches only."""
    return [
        lsn
        for batch in batches
        if all(lsn not in spans or spans[lsn][1] <= cut for lsn in batch)
        for lsn in batch
    ]


@settings(max_examples=scaled(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=operations,
    segment_bytes=st.integers(120, 1500),
    fraction=st.one_of(st.none(), st.floats(0, 1)),
    limit=st.integers(1, 9),
)
def test_any_cursor_resumes_exactly_the_rest(
    ops: list[tuple[int, bytes]], segment_bytes: int, fraction: float | None, limit: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shard-0"
        batches = write(path, ops, segment_bytes)
        spans = frame_spans(path)
        cut = crash(path, fraction) if fraction is not None else 2**63
        expected = committed(batches, spans, cut)

        # Drain with cursors; every emitted cursor must resume exactly the rest.
        cursors, seen, cursor = [0], [], 0
        while True:
            result = shard_read.read(path, cursor, limit)
            if not result.events:
                assert result.cursor.lsn == cursor
                break
            seen += [event.lsn for event in result.events]
            cursor = result.cursor.lsn
            cursors.append(cursor)
        assert seen == expected
        for start in cursors:
            rest = [e.lsn for e in shard_read.tail(path, start)]
            assert rest == [lsn for lsn in expected if lsn >= max(start, 1)]
        assert verify_shard(path).records == len(expected)

        # A writer opened after the crash continues right after the last committed record,
        # or after the LSNs of frames whose headers the cut left whole: a reader in another
        # process may have read those frames before the crash.
        named = [lsn for lsn, (start, _) in spans.items() if start + FRAME_HEADER_BYTES <= cut]
        named += [lsn for lsn, _ in read_index(index_path(str(path), min(spans, default=1)))]
        after = max([expected[-1] + 1 if expected else 1, *(lsn + 1 for lsn in named)])
        with open_writer(path, segment_bytes=segment_bytes) as writer:
            assert writer.next_lsn == after
            new = writer.append_batch([record(999, b"after"), record(998, b"crash")])
        assert [e.lsn for e in shard_read.tail(path, 0)] == expected + new
