"""The C JSON of plain values and images (moonish/values/_cjson.c) against the Python of
moonish.values.plainjson: the same bytes for any input, ``None`` where the caller must use
orjson, and the image of every type through moonish.values.model equal to orjson's. Skipped, by
name, in a pure build (``MOONISH_PURE=1``), which has no C extensions."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonish.extensions import is_compiled
from moonish.values import plainjson
from moonish.values.jsontext import PLAIN
from moonish.values.model import (
    HASH,
    LIST,
    SET,
    STRING,
    ZSET,
    Entry,
    SortedSet,
    _json_value,
    entry_from_image,
    full_image,
    text,
)

pytestmark = pytest.mark.skipif(
    not is_compiled(plainjson), reason="a pure build has no C extension"
)
_cjson = plainjson._cjson
# Mostly plain bytes, sometimes a quote, a backslash, a control byte or non-ASCII.
_bytes = st.one_of(
    st.binary(max_size=12).map(lambda b: bytes(PLAIN[c % len(PLAIN)] for c in b)),
    st.binary(max_size=12),
)
_scores = st.one_of(
    st.floats(allow_nan=False),
    st.integers(-(10**6), 10**6).map(float),
    st.integers(-(2**60), 2**60).map(float),  # integral, across repr's switch at 1e16
    st.floats(1e-12, 1e-3),
)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_bytes, max_size=8), fields=st.dictionaries(_bytes, _bytes, max_size=6))
@pytest.mark.slow
def test_c_gives_the_bytes_of_the_python(items: list[bytes], fields: dict[bytes, bytes]) -> None:
    for item in items:
        assert _cjson.quote(item) == plainjson.quote_py(item)
    assert _cjson.array(items) == plainjson.array_py(items)
    assert _cjson.sorted_array(set(items)) == plainjson.sorted_array_py(set(items))
    assert _cjson.pairs(fields) == plainjson.pairs_py(fields)
    for key in items[:3]:
        for db, expire in ((7, None), (0, 0), (65535, 1_700_000_000_000), (3, -5), (1, 2**62)):
            pieces = (db, key, b',"type":"set","value":', b"[]", expire, b"}")
            assert _cjson.image(*pieces) == plainjson.plain_image_py(*pieces)


@settings(max_examples=200, deadline=None)
@given(
    entries=st.dictionaries(
        st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
        st.lists(_bytes, max_size=6),
        max_size=5,
    )
)
@pytest.mark.slow
def test_stream_entries_in_c_are_the_pythons(entries: dict[tuple[int, int], list[bytes]]) -> None:
    assert _cjson.stream_bytes(entries) == plainjson.stream_bytes_py(entries)
    got = _cjson.stream_entries(entries)
    assert got == plainjson.stream_entries_py(entries)
    if got is not None:  # the JSON of the form images document (docs/images.md)
        pairs = {i: list(zip(f[::2], f[1::2], strict=True)) for i, f in entries.items()}
        assert orjson.loads(got) == [
            {"id": f"{ms}-{seq}", "fields": [[f.decode(), v.decode()] for f, v in pairs[ms, seq]]}
            for ms, seq in entries
        ]


@settings(max_examples=300, deadline=None)
@given(pairs=st.dictionaries(_bytes, _scores, max_size=8))
@pytest.mark.slow
def test_scored_is_orjsons_form_or_none_where_it_differs(pairs: dict[bytes, float]) -> None:
    order = sorted((score, member) for member, score in pairs.items())
    got = _cjson.scored(order)
    plain = all(not member.translate(None, PLAIN) for member in pairs)
    fits = all(math.isfinite(s) and not 1e-10 <= abs(s) < 1e-4 for s in pairs.values())
    assert (got is not None) == (plain and fits)
    if got is not None:
        assert got == orjson.dumps([[m.decode(), s] for s, m in order])
        assert got == plainjson.scored_py(order)


def test_plain_data_is_joined_in_c_and_other_data_goes_to_orjson() -> None:
    assert _cjson.array([b"a", b"b c"]) == b'["a","b c"]'
    assert _cjson.array([]) == b"[]"
    assert _cjson.array([b"a", b'q"']) is None
    assert _cjson.sorted_array({b"b", b"a", b"ab"}) == b'["a","ab","b"]'
    assert _cjson.pairs({b"f": b"v", b"g": b"\xff"}) is None
    assert _cjson.scored([(1.0, b"m"), (1e16, b"n")]) == b'[["m",1.0],["n",1e+16]]'
    assert _cjson.scored([(-0.0, b"a"), (0.0, b"b"), (-7.0, b"c")]) == (
        b'[["a",-0.0],["b",0.0],["c",-7.0]]'
    )
    assert _cjson.stream_entries({(1, 0): [b"f", b"v"], (1, 1): []}) is None  # no fields
    assert _cjson.scored([(5e-5, b"m")]) is None  # orjson: 0.00005, repr: 5e-05
    assert _cjson.scored([(math.inf, b"m")]) is None
    with pytest.raises(TypeError):
        _cjson.array([b"a", "b"])
    assert _cjson.image(2**64, b"k", b"", b"[]", None, b"}") is None  # Python formats it
    assert plainjson.scored is _cjson.scored  # this orjson writes floats as repr does


@pytest.mark.parametrize(
    "kind, value",
    [
        (STRING, b"plain"),
        (STRING, b'q"uote\xff'),
        (LIST, [b"x", b"y", b"x"]),
        (LIST, [b"\n"]),
        (SET, {b"z", b"a"}),
        (HASH, {b"f": b"1", b"g": b"\\"}),
        (ZSET, SortedSet({b"a": 1.5, b"b": -2.0, b"c": 3e-6})),
        (ZSET, SortedSet({b"a": math.inf})),
    ],
)
def test_images_equal_orjsons_json_of_the_image(kind: str, value: object) -> None:
    entry = Entry(kind, value, 1_700_000_000_123)
    made = orjson.loads(full_image(3, b"key\x00", entry))
    assert made == orjson.loads(
        orjson.dumps(
            {
                "db": 3,
                "key": text(b"key\x00"),
                "type": kind,
                "value": _json_value(entry),
                "expire_at_ms": 1_700_000_000_123,
            }
        )
    )
    db, key, back = entry_from_image(made)
    assert (db, key, back.type, back.expire_at_ms) == (3, b"key\x00", kind, 1_700_000_000_123)
    assert orjson.loads(full_image(db, key, back)) == made
