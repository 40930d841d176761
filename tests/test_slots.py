"""Hash slots as Redis Cluster computes them (moonish.slots), and moonish's even split of the slots
over shards."""

from __future__ import annotations

import pytest

from moonish.slots import hash_slot, shard_of_slot
from tests.support.redis.slots import crc16_xmodem


@pytest.mark.parametrize(
    ("key", "slot"),
    [(b"foo", 12182), (b"bar", 5061), (b"{user1000}.following", hash_slot(b"user1000"))],
)
def test_hash_slots_match_redis_cluster(key: bytes, slot: int) -> None:
    assert hash_slot(key) == slot


@pytest.mark.parametrize(
    ("key", "hashed"),
    [
        (b"foo{}{bar}", b"foo{}{bar}"),  # empty tag: the whole key
        (b"foo{{bar}}zap", b"{bar"),  # up to the first } after the first {
        (b"foo{bar}{zap}", b"bar"),  # only the first tag
        (b"\xff{\x00\x01}x", b"\x00\x01"),
    ],
)
def test_hash_tags_follow_the_cluster_spec(key: bytes, hashed: bytes) -> None:
    assert hash_slot(key) == crc16_xmodem(hashed) % 16384


def test_slot_ranges_are_contiguous_and_even() -> None:
    assert [shard_of_slot(s, 4) for s in (0, 4095, 4096, 8191, 8192, 12287, 12288, 16383)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]
