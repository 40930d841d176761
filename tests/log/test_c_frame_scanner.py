"""The C frame scanner (moonish/log/_cframes.c ``scan``) behind moonish.log.frames.scan_frames:
for any bytes (whole and sound frames, atomic batches, a torn or damaged tail, frames out of
sequence, batches cut short) the same frames, end and stop as the Python scanner
(``scan_frames_py``), from any position, record cap and file offset. A pure build has no C
extension: the module is skipped there, by name."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonish.extensions import is_compiled
from moonish.log import frames
from moonish.log.format import FLAG_BATCH, SEGMENT_HEADER_BYTES
from moonish.log.frames import LAYOUT_V1, encode_frame, scan_frames, scan_frames_py
from tests.support.scale import scaled

pytestmark = pytest.mark.skipif(frames._cframes is None, reason="a pure build has no C extension")

# One unit: a record on its own (size 1) or an atomic batch of ``size`` records.
units = st.lists(
    st.tuples(st.integers(1, 4), st.binary(max_size=60), st.integers(-(2**40), 2**62)),
    min_size=0,
    max_size=12,
)


def _log(shape: list[tuple[int, bytes, int]], first_lsn: int) -> tuple[bytes, list[int]]:
    """Frames for ``shape`` (one unit per item: size, payload, commit time) from
    ``first_lsn``, and where each frame starts."""
    data, starts, lsn = bytearray(), [], first_lsn
    for size, payload, commit_us in shape:
        for index in range(size):
            starts.append(len(data))
            flags = FLAG_BATCH if size > 1 else 0
            data += encode_frame(lsn, 1 + index % 6, payload, commit_us, index, size, flags)
            lsn += 1
    return bytes(data), starts


def _damage(data: bytes, rng: random.Random) -> bytes:
    """``data`` cut short, with a byte flipped, or with bytes inserted or dropped."""
    if not data:
        return data
    at = rng.randrange(len(data))
    kind = rng.randrange(4)
    if kind == 0:
        return data[:at]
    if kind == 1:
        return data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
    if kind == 2:
        return data[:at] + rng.randbytes(rng.randrange(1, 9)) + data[at:]
    return data[:at] + data[at + rng.randrange(1, 9) :]


def _both(data: bytes, pos: int, lsn: int, cap: int, resume: bool, file_offset: int) -> None:
    """The C path (scan_frames) and the Python scanner give equal results."""
    expected = scan_frames_py(data, pos, lsn, cap, mid_batch_start=resume, file_offset=file_offset)
    got = scan_frames(data, pos, lsn, cap, mid_batch_start=resume, file_offset=file_offset)
    assert got == expected


@settings(max_examples=scaled(500), deadline=None)
@given(
    shape=units,
    first_lsn=st.integers(1, 2**40),
    seed=st.integers(0, 2**32),
    cap=st.integers(0, 30),
    resume=st.booleans(),
    file_offset=st.sampled_from([0, SEGMENT_HEADER_BYTES, 1 << 33]),
)
def test_the_c_scanner_finds_what_the_python_one_finds(
    shape: list[tuple[int, bytes, int]],
    first_lsn: int,
    seed: int,
    cap: int,
    resume: bool,
    file_offset: int,
) -> None:
    rng = random.Random(seed)
    data, starts = _log(shape, first_lsn)
    cases = [(data, 0, first_lsn)]
    cases.append((_damage(data, rng), 0, first_lsn))
    cases.append((_damage(_damage(data, rng), rng), 0, first_lsn))
    if starts:  # from inside the log: a frame's start, maybe inside a batch
        i = rng.randrange(len(starts))
        cases.append((data, starts[i], first_lsn + i))
        cases.append((data, starts[i], first_lsn + i + rng.choice([-1, 1])))  # LSN mismatch
    cases.append((b"\x00" * 64 + data, 64, first_lsn))  # zeros before: not the scanner's start
    cases.append((data + b"\x00" * rng.randrange(1, 600), 0, first_lsn))  # a zero-filled tail
    for buf, pos, lsn in cases:
        _both(buf, pos, lsn, cap or len(buf) + 1, resume, file_offset)


def test_the_c_scanner_leaves_version_1_segments_and_odd_positions_to_python() -> None:
    data, _ = _log([(1, b"x", 5), (3, b"yy", 6)], 1)
    for pos in (len(data), len(data) + 5):
        _both(data, pos, 1, 10, False, 0)
    v1 = scan_frames(data, 0, 1, 10, layout=LAYOUT_V1)
    assert v1 == scan_frames_py(data, 0, 1, 10, layout=LAYOUT_V1)


def test_a_compiled_build_scans_in_c() -> None:
    if not is_compiled(frames):
        pytest.skip("the mypyc modules are not built (the C scanner is tested above)")
    assert frames._SCAN is not None
