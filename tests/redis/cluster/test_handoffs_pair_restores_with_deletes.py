"""The pairing of a slot migration's commands (moonish.redis.cluster.handoff), without servers:
a target's RESTORE-ASKING of a value moonish holds writes nothing and hands the key on; the
source's DEL then leaves out keys handed away, keys whose RESTORE-ASKING still waits on
another link, and keys found on their new node; the rest stay real deletes."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from moonish.redis.cluster.handoff import NO_CHANGE, Handoffs
from moonish.redis.rdb.reader import crc64
from moonish.slots import shard_of_key
from moonish.state.shard import ShardWriter
from tests.support.servers.redis_server import shard_writer


def string_payload(value: bytes) -> bytes:
    """A DUMP payload of a string (RDB type 0, a length-prefixed string), version 10."""
    head = b"\x00" + bytes([len(value)]) + value + struct.pack("<H", 10)
    return head + struct.pack("<Q", crc64(0, head))


@pytest.fixture
def writers(tmp_path: Path) -> Iterator[list[ShardWriter]]:
    opened = [shard_writer(tmp_path / f"shard-{k}") for k in range(2)]
    yield opened
    for writer in opened:
        writer.close()


def put(writers: list[ShardWriter], key: bytes, value: bytes) -> None:
    writers[shard_of_key(key, len(writers))].execute(0, [b"SET", key, value])


def test_a_restore_of_the_value_held_writes_nothing(writers: list[ShardWriter]) -> None:
    put(writers, b"k", b"v")
    handoffs = Handoffs(writers)
    argv = [b"RESTORE-ASKING", b"k", b"0", string_payload(b"v")]
    assert handoffs.restore("T", argv) == NO_CHANGE
    assert handoffs.handed == {b"k": "T"} and handoffs.counts["migrated"] == 1
    assert handoffs.delete("S", [b"DEL", b"k", b"gone"], lambda key: False) == [b"DEL", b"gone"]
    assert handoffs.handed == {}


def test_a_restore_of_another_value_replaces_it_and_a_new_key_is_created(
    writers: list[ShardWriter],
) -> None:
    put(writers, b"k", b"old")
    handoffs = Handoffs(writers)
    argv = [b"RESTORE-ASKING", b"k", b"0", string_payload(b"new"), b"ABSTTL"]
    assert handoffs.restore("T", argv) == [*argv[:4], b"REPLACE", b"ABSTTL"]
    fresh = [b"RESTORE-ASKING", b"n", b"0", string_payload(b"x")]
    assert handoffs.restore("T", fresh) == fresh
    assert handoffs.counts["migrated_changed"] == 1 and handoffs.counts["migrated_new"] == 1


def test_an_expiry_moved_by_the_migration_is_the_same_value(writers: list[ShardWriter]) -> None:
    """MIGRATE sends the time left; the target adds it to its own clock."""
    writers[shard_of_key(b"k", 2)].execute(0, [b"SET", b"k", b"v", b"PXAT", b"4000000000000"])
    handoffs = Handoffs(writers)
    moved = [b"RESTORE-ASKING", b"k", b"4000000000300", string_payload(b"v"), b"ABSTTL"]
    assert handoffs.restore("T", moved) == NO_CHANGE
    far = [b"RESTORE-ASKING", b"k", b"4000000005000", string_payload(b"v"), b"ABSTTL"]
    assert handoffs.restore("T", far)[4] == b"REPLACE"


def test_a_relative_ttl_cannot_be_compared(writers: list[ShardWriter]) -> None:
    put(writers, b"k", b"v")
    argv = [b"RESTORE-ASKING", b"k", b"5000", string_payload(b"v")]
    assert Handoffs(writers).restore("T", argv)[4:] == [b"REPLACE"]


def test_a_delete_before_its_restore_leaves_the_key_and_the_restore_writes_nothing(
    writers: list[ShardWriter],
) -> None:
    put(writers, b"k", b"v")
    handoffs = Handoffs(writers)
    argv = [b"RESTORE-ASKING", b"k", b"0", string_payload(b"v")]
    handoffs.received("T", argv)
    assert handoffs.delete("S", [b"UNLINK", b"k"], lambda key: False) == NO_CHANGE
    assert handoffs.restore("T", argv) == NO_CHANGE
    assert handoffs.handed == {} and not handoffs.waiting["T"]


def test_a_key_found_on_its_new_node_is_left_out_and_the_rest_deleted(
    writers: list[ShardWriter],
) -> None:
    handoffs = Handoffs(writers)
    moved = {b"a"}
    assert handoffs.delete("S", [b"DEL", b"a", b"b"], moved.__contains__) == [b"DEL", b"b"]
    assert handoffs.counts["migrated_unpaired"] == 1


def test_a_links_own_handed_key_is_a_real_delete(writers: list[ShardWriter]) -> None:
    put(writers, b"k", b"v")
    handoffs = Handoffs(writers)
    handoffs.restore("T", [b"RESTORE-ASKING", b"k", b"0", string_payload(b"v")])
    assert handoffs.delete("T", [b"DEL", b"k"], lambda key: False) == [b"DEL", b"k"]
