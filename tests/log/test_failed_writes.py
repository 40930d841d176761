"""Writes that fail: one that fails half way (the disk full) is undone and the writer goes on; a
failed fdatasync stops the writer for good; a rotation that cannot create its segment closes its
descriptors once."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

import moonish.log.repair
import moonish.log.writer
from moonish.cdc import shard_read
from moonish.errors import (
    UnavailableError,
)
from moonish.log.control import load_control
from moonish.log.verify import verify_shard
from tests.support.wal import kv, open_writer

WRITE_TOO_BIG = """
import os, resource, signal, sys
from moonish.errors import UnavailableError
from moonish.log.records import KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
writer = WalWriter(sys.argv[1], WriterOptions(fsync=FsyncPolicy.NEVER))
for i in range(5):
    writer.append(KvCommand(0, (b"SET", b"k%d" % i, b"v")))
segment = os.path.join(sys.argv[1], "0000000000000001.seg")
size = os.path.getsize(segment)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 30, hard))  # the disk is full after 30 bytes
try:
    writer.append(KvCommand(0, (b"SET", b"big", b"v" * 200)))
except UnavailableError as error:
    print("refused:", error)
print("size unchanged:", os.path.getsize(segment) == size)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
print("then:", writer.append(KvCommand(0, (b"SET", b"after", b"v"))))
writer.close()
"""


def test_a_write_that_fails_half_way_is_undone_and_the_writer_goes_on(shard: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", WRITE_TOO_BIG, str(shard)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "refused: the append of LSN 6 failed" in run.stdout and "nothing was appended" in (
        run.stdout
    )
    assert "size unchanged: True" in run.stdout and "then: 6" in run.stdout
    assert [e.lsn for e in shard_read.read(shard, 0).events] == [1, 2, 3, 4, 5, 6]
    assert verify_shard(shard).next_lsn == 7


def test_a_failed_fdatasync_stops_the_writer_for_good(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(moonish.log.writer.os, "fdatasync", failing)
        with pytest.raises(UnavailableError, match="may not be durable"):
            writer.sync()
        monkeypatch.undo()
        with pytest.raises(UnavailableError, match="stopped"):
            writer.append(kv(b"b"))
    assert not load_control(str(shard)).clean  # type: ignore[union-attr]
    with open_writer(shard) as writer:  # a new writer recovers from the disk
        assert writer.append(kv(b"c")) == 2


def test_descriptors_are_closed_once_when_a_rotation_cannot_create_its_segment(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = open_writer(shard, segment_bytes=300)
    writer.append(kv(b"a", b"v" * 100))
    real_open = moonish.log.writer.os.open

    def no_descriptors(path: str, *args: object, **kwargs: object) -> int:
        if str(path).endswith(".seg.tmp"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(moonish.log.writer.os, "open", no_descriptors)
    with pytest.raises(UnavailableError, match="new segment"):
        writer.append(kv(b"b", b"v" * 300))
    monkeypatch.undo()
    with pytest.raises(UnavailableError):
        writer.append(kv(b"c"))
    writer.close()  # releases the lock: the next writer opens
    with open_writer(shard) as again:
        assert again.next_lsn == 2
