"""The change feed's framed lines, token after each event: the C builder
(``moonish.cdc._cenvelope.token_lines``) against the Python one, byte for byte, and the token
text they write against ``moonish.cdc.token``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonish.cdc.token import Token
from moonish.log.frames import Frame
from moonish.serve import chunks
from moonish.serve.chunks import ROWS, SSE, _line_pieces, token_lines_py

C_BUILD = chunks.token_lines is not token_lines_py
needs_c = pytest.mark.skipif(not C_BUILD, reason="a pure build has no C extension")

LINES = [ROWS.LINE, SSE.LINE, chunks._TOKEN_ONLY]
lsns = st.integers(0, 2**64 - 1)


def _frame(lsn: int) -> Frame:
    return Frame(lsn, 1, 0, 0, 1, 0, b"", 0)


@st.composite
def feeds(draw: st.DrawFn) -> tuple[list[int], list[int], list[Frame], list[bytes]]:
    width = draw(st.integers(1, 6))
    positions = draw(st.lists(st.one_of(st.integers(0, 999), lsns), min_size=width, max_size=width))
    count = draw(st.integers(0, 40))
    indexes = draw(st.lists(st.integers(0, width - 1), min_size=count, max_size=count))
    frames = [_frame(draw(st.one_of(st.integers(0, 10**6), lsns))) for _ in range(count)]
    envelopes = draw(st.lists(st.binary(max_size=30), min_size=count, max_size=count))
    return positions, indexes, frames, envelopes


@settings(max_examples=300, deadline=None)
@given(feed=feeds(), line=st.sampled_from(LINES))
@pytest.mark.slow
def test_c_and_python_write_the_same_lines(
    feed: tuple[list[int], list[int], list[Frame], list[bytes]], line: bytes
) -> None:
    positions, indexes, frames, envelopes = feed
    head, mid, tail, with_envelopes = _line_pieces(line)
    head += f"m{len(positions)}.".encode()
    before = list(positions)
    args = (head, mid, tail, with_envelopes, positions, indexes, frames, envelopes)
    got = token_lines_py(*args)
    if C_BUILD:
        assert chunks.token_lines(*args) == got
    assert positions == before  # neither changes the positions it was given
    moved = list(positions)
    for i, (k, frame) in enumerate(zip(indexes, frames, strict=True)):
        moved[k] = max(moved[k], frame.lsn)
        expected = line % (str(Token(tuple(moved))).encode(), envelopes[i])
        assert got[i] == expected


@pytest.mark.parametrize("build", [pytest.param("c", marks=needs_c), "python"])
def test_a_shard_index_outside_the_token_is_refused(build: str) -> None:
    lines = chunks.token_lines if build == "c" else token_lines_py
    with pytest.raises(IndexError):
        lines(b"", b"", b"", True, [0, 0], [2], [_frame(5)], [b"x"])
    with pytest.raises(IndexError):
        lines(b"", b"", b"", True, [0, 0], [-1], [_frame(5)], [b"x"])
    with pytest.raises((TypeError, ValueError)):  # lengths that differ
        lines(b"", b"", b"", True, [0], [0, 0], [_frame(1)], [b"x"])


@needs_c
def test_the_c_builder_refuses_what_is_not_a_frame_or_bytes() -> None:
    with pytest.raises(TypeError):
        chunks.token_lines(b"", b"", b"", True, [0], [0], [_frame(1)], ["not bytes"])
    with pytest.raises(TypeError):
        chunks.token_lines(b"", b"", b"", True, [0], [0], [object()], [b"x"])
