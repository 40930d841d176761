"""Redis Cluster hash slots and moonish's slot-to-shard mapping.

Source: Redis Cluster specification, "Key distribution model" and "Hash tags": the slot is
``CRC16(key) mod 16384`` with CRC16-XMODEM (polynomial 0x1021, initial value 0), which is the
standard library's ``binascii.crc_hqx(data, 0)``; if the key holds ``{`` followed later by ``}``
with at least one byte between them, only the bytes between the first ``{`` and the first ``}``
after it are hashed.
"""

from __future__ import annotations

from binascii import crc_hqx

SLOT_COUNT = 16384


def hash_tag(key: bytes) -> bytes:
    """The part of ``key`` that is hashed: its ``{hashtag}`` if it has a non-empty one."""
    start = key.find(b"{")
    if start != -1:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def hash_slot(key: bytes) -> int:
    """The Redis Cluster hash slot of ``key``, 0..16383."""
    return crc_hqx(hash_tag(key), 0) % SLOT_COUNT


def shard_of_slot(slot: int, shards: int) -> int:
    """The shard owning ``slot`` when ``shards`` shards split the slots into contiguous, even
    ranges: ``slot * shards // 16384``."""
    return slot * shards // SLOT_COUNT


def shard_of_key(key: bytes, shards: int) -> int:
    """The shard that owns ``key``."""
    return crc_hqx(hash_tag(key), 0) % SLOT_COUNT * shards // SLOT_COUNT


def shard_groups(shards: int, processes: int) -> list[range]:
    """The shards each of ``processes`` processes writes when an import or a capture runs in
    several: process ``w`` writes ``[w * shards // processes, (w + 1) * shards // processes)``
    (contiguous, as even as the counts allow)."""
    return [range(w * shards // processes, (w + 1) * shards // processes) for w in range(processes)]
