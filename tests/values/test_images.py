"""Images: the joined-bytes fast path equals the general orjson path for any value, images
round-trip through snapshots, and the size limit decides by the JSON's real size."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moonish.values import model as values
from moonish.values.model import (
    HASH,
    LIST,
    SET,
    STREAM,
    STRING,
    ZSET,
    Entry,
    SortedSet,
    Stream,
    entry_from_image,
    full_image,
    state_image,
)
from moonish.values.streams import ConsumerGroup, PendingEntry

data = st.one_of(st.binary(max_size=6), st.sampled_from([b"a", b"b c", b'"', b"\\", b"\xff"]))
scores = st.floats(allow_nan=False, width=64)


def stream_of(
    items: list[tuple[int, list[bytes]]], groups: dict[bytes, ConsumerGroup] | None = None
) -> Stream:
    stream = Stream()
    for ms, fields in items:
        stream.entries[(ms, 0)] = fields
        stream.last_id = (ms, 0)
    stream.entries_added = len(items) + 3
    stream.max_deleted_id = (1, 7) if items else (0, 0)
    stream.groups = groups or {}
    return stream


def group_of(last_ms: int, read: int, consumers: dict[bytes, int], owned: list[int]) -> Any:
    group = ConsumerGroup((last_ms, 1), read)
    group.consumers = consumers
    names = sorted(consumers)
    for n, ms in enumerate(owned if names else []):
        group.pending[(ms, 0)] = PendingEntry(names[n % len(names)], 10**12 + n, n)
    return group


groups = st.dictionaries(
    data,
    st.builds(
        group_of,
        st.integers(0, 99),
        st.sampled_from([-1, 0, 5]),
        st.dictionaries(data, st.integers(0, 10**13), max_size=3),
        st.lists(st.integers(1, 99), max_size=4, unique=True),
    ),
    max_size=3,
)


entries = st.one_of(
    st.builds(Entry, st.just(STRING), data),
    st.builds(Entry, st.just(LIST), st.lists(data, max_size=6)),
    st.builds(Entry, st.just(SET), st.sets(data, max_size=6)),
    st.builds(Entry, st.just(HASH), st.dictionaries(data, data, max_size=6)),
    st.builds(
        Entry, st.just(ZSET), st.builds(SortedSet, st.dictionaries(data, scores, max_size=6))
    ),
    st.builds(
        Entry,
        st.just(STREAM),
        st.builds(
            stream_of,
            st.lists(
                st.tuples(
                    st.integers(1, 99),
                    st.lists(data, min_size=2, max_size=4).map(lambda f: f[: len(f) // 2 * 2]),
                ),
                max_size=4,
                unique_by=lambda item: item[0],
            ).map(sorted),
            groups,
        ),
    ),
)


@given(entries)
def test_fast_path_equals_general_path(entry: Entry) -> None:
    assert values.value_json(entry) == orjson.dumps(values._json_value(entry))


@given(entries, st.integers(0, 2), st.one_of(st.none(), st.integers(0, 10**13)))
def test_images_round_trip(entry: Entry, db: int, expire_at_ms: int | None) -> None:
    entry.expire_at_ms = expire_at_ms
    back_db, key, back = entry_from_image(orjson.loads(state_image(db, b"k\xff", entry)))
    assert (back_db, key) == (db, b"k\xff")
    assert full_image(db, key, back) == full_image(db, b"k\xff", entry)


@given(entries, st.integers(0, 200))
def test_limit_follows_the_json_size(entry: Entry, limit: int) -> None:
    whole = orjson.loads(full_image(0, b"k", Entry(entry.type, entry.value)))["value"]
    image = orjson.loads(full_image(0, b"k", entry, limit))["value"]
    if len(orjson.dumps(whole)) <= limit:
        assert image == whole
    else:
        assert image == {"_omitted_length": values.length(entry)}


def test_older_stream_images_still_load() -> None:
    """Images written before streams kept counters and groups: the value is the entries
    list, and lossless ones carry ``last_id`` beside it; entries_added is then the length
    (as Redis migrates a pre-7.0 RDB stream)."""
    old = {
        "db": 0,
        "key": "s",
        "type": "stream",
        "expire_at_ms": None,
        "last_id": "9-0",
        "value": [{"id": "1-0", "fields": [["f", "v"]]}, {"id": "2-0", "fields": [["g", "w"]]}],
    }
    _, _, entry = entry_from_image(old)
    stream = entry.value
    assert list(stream.entries) == [(1, 0), (2, 0)]
    assert (stream.last_id, stream.entries_added, stream.max_deleted_id) == ((9, 0), 2, (0, 0))
    assert stream.groups == {}
    del old["last_id"]
    assert entry_from_image(old)[2].value.last_id == (2, 0)  # a full image: the last entry


zset_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "add", "remove", "pop"]),
        st.integers(0, 3000).map(lambda n: b"m%d" % n),
        st.sampled_from([0.0, -0.0, 1.0, 2.5, -7.0, float("inf"), float("-inf")]),
        st.integers(1, 40),
        st.booleans(),
    ),
    max_size=300,
)


@given(zset_ops, st.sampled_from([0, 10, values.SMALL_ZSET - 3, values.SMALL_ZSET + 5]))
@pytest.mark.slow
def test_sorted_set_order_across_the_list_limit(ops: list[Any], start: int) -> None:
    """A sorted set starting in a plain list, near its limit (so adds cross it) or in a
    SortedList, then changed at random, always holds Redis's order (score, then member
    bytes) of its scores, with the JSON of the general path; a score equal to the old one
    (-0.0 to 0.0 too) changes nothing, as in Redis's ``zsetAdd``."""
    zset = SortedSet({b"s%d" % n: float(n % 7) for n in range(start)})
    expect = dict(zset.scores)
    for op, member, score, count, highest in ops:
        if op == "add":
            if member not in expect or expect[member] != score:
                expect[member] = score
            zset.add(member, score)
        elif op == "remove":
            assert zset.remove(member) == (expect.pop(member, None) is not None)
        else:
            order = sorted(expect.items(), key=lambda item: (item[1], item[0]))
            taken = order[::-1][:count] if highest else order[:count]
            assert zset.pop(count, highest) == taken
            for gone, _ in taken:
                del expect[gone]
    assert zset.scores == expect
    ordered = sorted(expect.items(), key=lambda item: (item[1], item[0]))
    assert [(m, repr(s)) for m, s in zset.items()] == [(m, repr(s)) for m, s in ordered]
    entry = Entry(ZSET, zset)
    assert values.value_json(entry) == orjson.dumps(values._json_value(entry))
