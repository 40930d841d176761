"""The writer's gathered appends (``WriterOptions.write_buffer_bytes``, what imports use) and
the source position an append stores on its last record."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moonish.errors import InvalidArgumentError, UnavailableError
from moonish.log.format import INDEX_SUFFIX, SEGMENT_SUFFIX
from moonish.log.payloads import decode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import KvChange, Message, ViewType
from moonish.log.writer import FsyncPolicy, WriterOptions
from tests.support.paths import ROOT
from tests.support.wal import kv, open_writer


def visible(shard: Path) -> list[int]:
    reader = ShardReader(shard)
    reader.seek(0)
    try:
        return [frame.lsn for frame in reader.poll(1_000_000)]
    finally:
        reader.close()


def files(shard: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(shard.iterdir()) if p.suffix != ".json"}


def write_mixed(shard: Path, **options: object) -> None:
    with open_writer(shard, segment_bytes=4096, index_interval_bytes=300, **options) as writer:
        for i in range(200):
            if i % 7 == 0:
                writer.append_batch([kv(b"b%d" % i), kv(b"c%d" % i, b"x" * (i % 50))])
            else:
                writer.append(kv(b"k%d" % i, b"v" * (i % 90)))


def test_gathered_appends_write_the_same_files_as_single_writes(tmp_path: Path) -> None:
    write_mixed(tmp_path / "single")
    write_mixed(tmp_path / "gathered", write_buffer_bytes=1000)
    assert files(tmp_path / "single") == files(tmp_path / "gathered")  # index files too
    assert any(n.endswith(INDEX_SUFFIX) and data for n, data in files(tmp_path / "single").items())
    assert len([n for n in files(tmp_path / "single") if n.endswith(SEGMENT_SUFFIX)]) > 5


def test_gathered_appends_are_visible_once_written(shard: Path) -> None:
    with open_writer(shard, write_buffer_bytes=10_000) as writer:
        assert writer.append(kv(b"a")) == 1
        assert writer.append_batch([kv(b"b"), kv(b"c")]) == [2, 3]
        assert visible(shard) == []
        writer.flush()
        assert visible(shard) == [1, 2, 3]
        writer.append(kv(b"d"))
        writer.sync()
        assert visible(shard) == [1, 2, 3, 4]
        writer.append(kv(b"e"))
        writer.heartbeat()  # close time promises nothing below it is still to come
        assert visible(shard) == [1, 2, 3, 4, 5]
        while writer.next_lsn < 500:  # past the threshold: written without being asked
            writer.append(kv(b"k", b"v" * 100))
        assert len(visible(shard)) > 400
    assert visible(shard) == list(range(1, 500))


KILLED = """
import os, sys
from pathlib import Path
from tests.support.wal import kv, open_writer
writer = open_writer(Path(sys.argv[1]), write_buffer_bytes=1 << 20)
for i in range(10):
    writer.append(kv(b"a%d" % i))
writer.flush()
for i in range(10):
    writer.append_batch([kv(b"b%d" % i), kv(b"c%d" % i)])
os._exit(0)  # killed: the gathered appends are lost, whole
"""


def test_a_killed_writer_loses_its_gathered_appends_whole(shard: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", KILLED, str(shard)], env=env, check=True)
    with open_writer(shard) as writer:
        assert writer.next_lsn == 11
    assert visible(shard) == list(range(1, 11))


def test_a_failed_write_of_gathered_appends_stops_the_writer(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = open_writer(shard, write_buffer_bytes=10_000)
    writer.append(kv(b"a"))

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(UnavailableError, match="writer stopped"):
        writer.flush()
    monkeypatch.undo()
    with pytest.raises(UnavailableError, match="writer stopped"):
        writer.append(kv(b"b"))
    writer.close()
    with open_writer(shard) as reopened:
        assert reopened.next_lsn == 1


def test_gathering_is_refused_with_fsync_always() -> None:
    with pytest.raises(InvalidArgumentError, match="write_buffer_bytes"):
        WriterOptions(fsync=FsyncPolicy.ALWAYS, write_buffer_bytes=1)
    with pytest.raises(InvalidArgumentError, match="write_buffer_bytes"):
        WriterOptions(write_buffer_bytes=-1)


def test_an_append_stores_its_source_on_its_last_record(shard: Path) -> None:
    change = KvChange("c", 0, b"SET", b"k", b"", b"{}", ViewType.NEW_IMAGE, source=b"own")
    with open_writer(shard) as writer:
        writer.append_batch([change, change], source=b'{"aof":"x","offset":9}')
        writer.append(Message("moonish.function", b"code"), source=b'{"aof":"x","offset":10}')
        writer.append(change)
    reader = ShardReader(shard)
    reader.seek(0)
    records = [decode_payload(f.record_type, f.payload) for f in reader.poll(10)]
    reader.close()
    assert [r.source for r in records] == [
        b"own",
        b'{"aof":"x","offset":9}',
        b'{"aof":"x","offset":10}',
        b"own",
    ]
