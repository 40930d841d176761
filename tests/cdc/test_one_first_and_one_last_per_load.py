"""The rows an RDB load writes over several shards (``wal import-rdb``, also with its shards
loaded by several processes at once; an AOF's RDB base) read as one snapshot in a merged
read: exactly one ``source.snapshot`` ``"first"`` (the first row) and one ``"last"`` (the last
row), each shard's own first and last rows ``"first_in_data_collection"`` and
``"last_in_data_collection"`` (Debezium's marks for a table's), the rest ``"true"``; a shard's
own read is a whole stream and keeps its first and last rows ``"first"`` and ``"last"``."""

from __future__ import annotations

import struct
from pathlib import Path

import orjson
import pytest

import moonish
from moonish.clock import FixedClock
from moonish.redis.aof.importer import import_aof
from moonish.redis.rdb.reader import crc64
from moonish.redis.rdbimport.importer import import_rdb

SHARDS = 4
KEYS = 40


def _rdb(keys: int) -> bytes:
    """An RDB file (version 11) of ``keys`` strings in db 0: ``key:<i>`` = ``value-<i>``."""
    body = bytearray(b"REDIS0011\xfe\x00")
    for i in range(keys):
        key, value = f"key:{i}".encode(), f"value-{i}".encode()
        body += b"\x00" + bytes([len(key)]) + key + bytes([len(value)]) + value
    body += b"\xff"
    return bytes(body) + struct.pack("<Q", crc64(0, bytes(body)))


def _marks(path: Path, start: int | str = "earliest") -> list[tuple[int, str]]:
    """(shard, source.snapshot) of every row of a read of ``path`` from ``start`` (a data
    directory from a token, or a shard from an LSN), in stream order."""
    result = moonish.read(str(path), start, limit=10_000)
    rows = []
    for event in result.events:
        envelope = orjson.loads(event.envelope)
        if envelope["op"] == "r":
            rows.append((envelope["source"]["shard"], envelope["source"]["snapshot"]))
    return rows


def _check_merged(rows: list[tuple[int, str]], keys: int = KEYS) -> None:
    marks = [mark for _, mark in rows]
    assert len(rows) == keys
    assert marks[0] == "first" and marks[-1] == "last"
    assert marks.count("first") == 1 and marks.count("last") == 1
    shards = sorted({shard for shard, _ in rows})
    assert len(shards) > 2  # a first shard, a last, and shards between them
    for shard in shards:
        own = [mark for each, mark in rows if each == shard]
        head = "first" if shard == rows[0][0] else "first_in_data_collection"
        tail = "last" if shard == rows[-1][0] else "last_in_data_collection"
        assert (own[0], own[-1]) == (head, tail), shard
        assert set(own[1:-1]) <= {"true"}


def test_a_merged_read_of_an_rdb_import_shows_one_first_and_one_last(tmp_path: Path) -> None:
    dump = tmp_path / "dump.rdb"
    dump.write_bytes(_rdb(KEYS))
    import_rdb(dump, tmp_path / "data", SHARDS, clock=FixedClock(1_796_000_000_000_000))
    _check_merged(_marks(tmp_path / "data"))


@pytest.mark.parametrize("processes", [2, 4])
def test_a_load_written_by_several_processes_shows_one_first_and_one_last(
    tmp_path: Path, processes: int
) -> None:
    """The workers write their shards at once (real forked processes, rows interleaving by
    commit time) and agree on the load's first and last rows (moonish.state.spread)."""
    keys = 9_000  # the workers overlap in time
    dump = tmp_path / "dump.rdb"
    dump.write_bytes(_rdb(keys))
    import_rdb(dump, tmp_path / "data", SHARDS, processes=processes)
    rows = _marks(tmp_path / "data")
    _check_merged(rows, keys)
    again = _marks(tmp_path / "data")  # the same marks on every read
    assert again == rows


def test_a_merged_read_of_an_aof_base_shows_one_first_and_one_last(tmp_path: Path) -> None:
    aof = tmp_path / "appendonlydir"
    aof.mkdir()
    (aof / "appendonly.aof.1.base.rdb").write_bytes(_rdb(KEYS))
    (aof / "appendonly.aof.1.incr.aof").write_bytes(b"")
    (aof / "appendonly.aof.manifest").write_bytes(
        b"file appendonly.aof.1.base.rdb seq 1 type b\n"
        b"file appendonly.aof.1.incr.aof seq 1 type i\n"
    )
    import_aof(aof, tmp_path / "data", SHARDS)
    _check_merged(_marks(tmp_path / "data"))


def test_a_shards_own_read_marks_its_first_and_last_rows(tmp_path: Path) -> None:
    dump = tmp_path / "dump.rdb"
    dump.write_bytes(_rdb(KEYS))
    import_rdb(dump, tmp_path / "data", SHARDS)
    for shard in range(SHARDS):
        marks = [mark for _, mark in _marks(tmp_path / "data" / f"shard-{shard}", 0)]
        if len(marks) == 1:
            assert marks == ["last"]
        elif marks:
            assert marks[0] == "first" and marks[-1] == "last"
            assert set(marks[1:-1]) <= {"true"}


def test_shards_of_one_row_each_give_one_first_and_one_last(tmp_path: Path) -> None:
    """A shard whose only row is both its first and last: the load's first row, then the
    load's last (a row alone is marked last in its shard's own read)."""
    dump = tmp_path / "dump.rdb"
    dump.write_bytes(_rdb(2))
    import_rdb(dump, tmp_path / "data", SHARDS)
    rows = _marks(tmp_path / "data")
    assert [mark for _, mark in rows] == ["first", "last"]
    assert rows[0][0] != rows[1][0]
    for shard, _ in rows:
        assert _marks(tmp_path / "data" / f"shard-{shard}", 0) == [(shard, "last")]
