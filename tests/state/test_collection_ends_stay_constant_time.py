"""A list is a deque and a stream's entries an OrderedDict however the key came to be (a push,
SORT STORE, LMOVE into a new key, COPY, a snapshot the writer rebuilds from, a DUMP payload),
so that pushes, pops and trimming at their ends cost what Redis documents (O(1) per element)
on every key, and those commands keep Redis's semantics on each form."""

from __future__ import annotations

from collections import OrderedDict, deque
from pathlib import Path

from moonish.clock import FixedClock
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.wal import START_US

LISTS = [b"pushed", b"sorted", b"moved", b"copied"]


def _writer(shard: Path) -> ShardWriter:
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    return ShardWriter(shard, options, FixedClock(START_US, 1000))


def _make_keys(writer: ShardWriter) -> None:
    writer.execute(0, [b"RPUSH", b"pushed", b"c", b"a", b"b", b"d"])
    writer.execute(0, [b"SORT", b"pushed", b"ALPHA", b"STORE", b"sorted"])
    writer.execute(0, [b"LPUSH", b"source", b"x", b"y"])
    writer.execute(0, [b"LMOVE", b"source", b"moved", b"LEFT", b"RIGHT"])
    writer.execute(0, [b"COPY", b"pushed", b"copied"])
    for n in range(1, 6):
        writer.execute(0, [b"XADD", b"events", b"%d-0" % n, b"f", b"v%d" % n])
    writer.execute(0, [b"COPY", b"events", b"events-copy"])


def _check_forms(writer: ShardWriter) -> None:
    for key in LISTS:
        entry = writer.keyspace.get(0, key)
        assert entry is not None and isinstance(entry.value, deque), key
    for key in (b"events", b"events-copy"):
        entry = writer.keyspace.get(0, key)
        assert entry is not None and isinstance(entry.value.entries, OrderedDict), key


def _list(writer: ShardWriter, key: bytes) -> list[bytes]:
    entry = writer.keyspace.get(0, key)
    return [] if entry is None else list(entry.value)


def test_every_way_a_list_or_stream_is_made_keeps_constant_time_ends(tmp_path: Path) -> None:
    with _writer(tmp_path / "shard") as writer:
        _make_keys(writer)
        _check_forms(writer)
        writer.checkpoint()
    with _writer(tmp_path / "shard") as writer:  # rebuilt from the snapshot
        _check_forms(writer)
    with _writer(tmp_path / "other") as writer:  # rebuilt from the records alone
        _make_keys(writer)
    with _writer(tmp_path / "other") as writer:
        _check_forms(writer)


def test_pushes_pops_and_trims_at_both_ends_follow_redis(tmp_path: Path) -> None:
    with _writer(tmp_path / "shard") as writer:
        _make_keys(writer)
        writer.checkpoint()
    with _writer(tmp_path / "shard") as writer:
        assert writer.execute(0, [b"LPUSH", b"sorted", b"1", b"2"]).reply == 6
        assert _list(writer, b"sorted") == [b"2", b"1", b"a", b"b", b"c", b"d"]
        assert writer.execute(0, [b"RPOP", b"sorted", b"2"]).reply == [b"d", b"c"]
        assert writer.execute(0, [b"LPOP", b"sorted"]).reply == b"2"
        assert writer.execute(0, [b"LMOVE", b"sorted", b"sorted", b"RIGHT", b"LEFT"]).reply == b"b"
        assert _list(writer, b"sorted") == [b"b", b"1", b"a"]
        writer.execute(0, [b"LSET", b"sorted", b"-1", b"z"])
        writer.execute(0, [b"LINSERT", b"sorted", b"AFTER", b"1", b"k"])
        assert _list(writer, b"sorted") == [b"b", b"1", b"k", b"z"]
        writer.execute(0, [b"RPUSH", b"sorted", b"1", b"x", b"1"])
        assert writer.execute(0, [b"LREM", b"sorted", b"-2", b"1"]).reply == 2
        assert _list(writer, b"sorted") == [b"b", b"1", b"k", b"z", b"x"]
        writer.execute(0, [b"LTRIM", b"sorted", b"1", b"-2"])
        assert _list(writer, b"sorted") == [b"1", b"k", b"z"]
        writer.execute(0, [b"LTRIM", b"sorted", b"2", b"1"])  # an empty range removes the key
        assert writer.keyspace.get(0, b"sorted") is None
        # a capped stream trims at its front: MAXLEN, then MINID
        writer.execute(0, [b"XADD", b"events", b"MAXLEN", b"=", b"3", b"6-0", b"f", b"v6"])
        stream = writer.keyspace.get(0, b"events")
        assert stream is not None
        assert list(stream.value.entries) == [(4, 0), (5, 0), (6, 0)]
        writer.execute(0, [b"XTRIM", b"events", b"MINID", b"6"])
        assert list(stream.value.entries) == [(6, 0)]
        assert stream.value.first_id() == (6, 0)
