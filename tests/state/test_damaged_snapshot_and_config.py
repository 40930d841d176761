"""A shard's snapshot and stream configuration damaged: any damaged byte is corruption naming the
file, never a traceback; a version 0.1.0 configuration is read and given a checksum."""

from __future__ import annotations

from pathlib import Path

import pytest

from moonish.cdc import shard_read
from moonish.errors import CorruptionError
from moonish.state.shard import ShardOptions, ShardWriter


def _keyspace_shard(path: Path) -> Path:
    with ShardWriter(path, ShardOptions(expiry_sweep_ms=0)) as writer:
        writer.execute(0, ["SET", "k", "v"])
        writer.execute(0, ["HSET", "h", "f", "v"])
        writer.checkpoint()
    return path


@pytest.mark.parametrize(
    "target", [b'"format"', b'"version":2', b'"keys"', b'"lsn"', b'"libraries"']
)
def test_any_damaged_snapshot_byte_is_corruption_never_a_traceback(
    tmp_path: Path, target: bytes
) -> None:
    shard = _keyspace_shard(tmp_path / "shard-0")
    (snap,) = shard.glob("*.snap")
    data = snap.read_bytes()
    position = data.index(target) + len(target) - 2
    for bit in range(8):
        damaged = bytearray(data)
        damaged[position] ^= 1 << bit
        snap.write_bytes(bytes(damaged))
        with pytest.raises(CorruptionError) as info:
            shard_read.read(shard, 0, snapshot=True)
        assert info.value.path == str(snap)


def test_a_flipped_stream_configuration_byte_is_corruption(tmp_path: Path) -> None:
    shard = _keyspace_shard(tmp_path / "shard-0")
    config = shard / "stream.json"
    data = config.read_bytes()
    position = data.index(b"4096") + 3  # 4096 -> 4097: still a valid configuration
    damaged = bytearray(data)
    damaged[position] ^= 0x01
    config.write_bytes(bytes(damaged))
    with pytest.raises(CorruptionError, match="checksum") as info:
        shard_read.info(shard)
    assert info.value.path == str(config)


def test_a_stream_configuration_of_0_1_0_is_read_and_given_a_checksum(tmp_path: Path) -> None:
    shard = _keyspace_shard(tmp_path / "shard-0")
    config = shard / "stream.json"
    config.write_bytes(b'{"enabled": true, "view_type": "KEYS_ONLY", "max_value_bytes": 10}\n')
    assert shard_read.info(shard)["stream"]["view_type"] == "KEYS_ONLY"
    with ShardWriter(shard, ShardOptions(expiry_sweep_ms=0)):
        pass
    assert b'"crc32c"' in config.read_bytes()
    assert shard_read.info(shard)["stream"]["max_value_bytes"] == 10
