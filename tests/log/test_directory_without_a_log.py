"""A directory with no log is refused by the reader, the shard read and the verifier, while writers
still create shards in new and empty directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from moonish.cdc import shard_read
from moonish.errors import InvalidArgumentError
from moonish.log.reader import ShardReader
from moonish.log.verify import verify_shard
from tests.support.wal import kv, open_writer


def test_the_library_refuses_it_too(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="holds no WAL segment"):
        ShardReader(tmp_path)
    with pytest.raises(InvalidArgumentError, match="holds no WAL segment"):
        shard_read.read(tmp_path, 0)
    with pytest.raises(InvalidArgumentError, match="holds no WAL segment"):
        verify_shard(tmp_path)


def test_writers_still_create_shards_in_new_and_empty_directories(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for shard in (tmp_path / "new", tmp_path / "empty"):
        with open_writer(shard) as writer:
            writer.append(kv(b"k"))
        assert [event.lsn for event in shard_read.read(shard, 0).events] == [1]
