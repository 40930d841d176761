"""Envelopes follow the conventions of real Debezium 3.6.3 output (fixtures/debezium/, copied
from a PostgreSQL connector run with JsonConverter schemas.enable=false)."""

from __future__ import annotations

import base64
import json
from typing import Any

import orjson
import pytest

from moonish.cdc.envelope import EnvelopeEncoder, text_or_b64
from moonish.clock import FixedClock
from moonish.log.format import FLAG_BATCH
from moonish.log.frames import Frame
from moonish.log.payloads import encode_payload
from moonish.log.records import (
    Checkpoint,
    EntityKind,
    GraphMutation,
    KvCommand,
    Message,
    Record,
    TemporalUpsert,
)
from tests.support.paths import ROOT

DEBEZIUM = ROOT / "fixtures" / "debezium"
CLOCK_US = 1_796_000_000_123_456


def debezium(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((DEBEZIUM / f"{name}.value.json").read_text())
    return value


def envelope(record: Record, lsn: int = 5, batch: tuple[int, int] | None = None) -> dict[str, Any]:
    rtype, payload = encode_payload(record)
    flags, (index, size) = (FLAG_BATCH, batch) if batch else (0, (0, 1))
    frame = Frame(lsn, rtype, flags, index, size, 1_795_000_000_000_001, payload, 40)
    encoder = EnvelopeEncoder(2, "inventory", FixedClock(CLOCK_US), messages=True)
    event = encoder.encode([frame])[0]
    value: dict[str, Any] = orjson.loads(event.envelope)
    return value


SET = KvCommand(0, (b"SET", b"user:1", b"alice"))
DEL = KvCommand(3, (b"DEL", b"user:1"))


@pytest.mark.parametrize("reference", ["pg_insert", "pg_update", "pg_delete"])
def test_data_change_fields_come_in_debeziums_order(reference: str) -> None:
    assert list(envelope(SET)) == list(debezium(reference))
    assert list(envelope(DEL)) == list(debezium(reference))


def test_source_carries_debeziums_common_fields_and_types() -> None:
    ours, theirs = envelope(SET)["source"], debezium("pg_update")["source"]
    for field in ("version", "connector", "name", "ts_ms", "ts_us", "ts_ns", "snapshot", "lsn"):
        assert type(ours[field]) is type(theirs[field]), field
    assert ours["version"].startswith("moonish-") and ours["connector"] == "moonish"
    assert ours["name"] == "inventory" and ours["snapshot"] == theirs["snapshot"] == "false"
    assert (ours["ts_ms"], ours["ts_us"], ours["ts_ns"]) == (
        1_795_000_000_000,
        1_795_000_000_000_001,
        1_795_000_000_000_001_000,
    )
    assert (ours["shard"], ours["lsn"], ours["db"]) == (2, 5, 0)


def test_top_level_ts_is_processing_time_from_the_clock() -> None:
    value = envelope(SET)
    assert (value["ts_ms"], value["ts_us"], value["ts_ns"]) == (
        CLOCK_US // 1000,
        CLOCK_US,
        CLOCK_US * 1000,
    )


def test_delete_has_the_key_in_before_and_null_after_like_debezium() -> None:
    theirs = debezium("pg_delete")
    assert theirs["op"] == "d" and theirs["after"] is None and theirs["before"]
    ours = envelope(DEL)
    assert ours["op"] == "d" and ours["after"] is None
    assert ours["before"]["key"] == "user:1" and ours["before"]["db"] == 3


def test_write_is_an_update_with_the_key_in_after() -> None:
    ours = envelope(SET)
    assert (ours["op"], ours["before"]) == ("u", None)
    assert ours["after"] == {
        "record_type": "kv",
        "command": "SET",
        "db": 0,
        "key": "user:1",
        "args": ["user:1", "alice"],
    }


def test_removing_a_hash_field_is_not_a_delete_of_the_key() -> None:
    assert envelope(KvCommand(0, (b"HDEL", b"h", b"f")))["op"] == "u"
    assert envelope(KvCommand(0, (b"SREM", b"s", b"m")))["op"] == "u"


def test_rename_deletes_the_source_and_writes_the_destination() -> None:
    argv = (b"RENAME", b"a", b"b")
    assert envelope(KvCommand(0, argv, 1))["op"] == "d"
    assert envelope(KvCommand(0, argv, 2))["after"]["key"] == "b"


def test_flush_is_a_truncate_shaped_like_debeziums() -> None:
    theirs = debezium("pg_truncate")
    ours = envelope(KvCommand(4, (b"FLUSHDB",), 0))
    assert list(ours) == list(theirs)
    assert (ours["op"], ours["before"], ours["after"]) == ("t", None, None)
    assert ours["source"]["db"] == 4
    assert envelope(KvCommand(4, (b"FLUSHALL",), 0))["source"]["db"] is None


def test_checkpoint_is_a_message_with_no_row_images() -> None:
    theirs = debezium("pg_message")
    ours = envelope(Checkpoint(41, "snapshot-41"))
    assert list(ours) == list(theirs) == ["op", "ts_ms", "source", "transaction", "message"]
    assert ours["op"] == "m" and "after" not in ours and "before" not in ours
    assert list(ours["message"]) == list(theirs["message"]) == ["prefix", "content"]
    content = orjson.loads(base64.b64decode(ours["message"]["content"]))
    assert content == {"checkpoint_lsn": 41, "label": "snapshot-41"}


def test_message_record_is_a_message_with_its_prefix_db_and_base64_content() -> None:
    theirs = debezium("pg_message")
    ours = envelope(Message("moonish.skipped", b"*1\r\n$4\r\nPING\r\n\xff", 7), batch=(1, 2))
    assert list(ours) == list(theirs) and ours["op"] == "m"
    assert ours["message"] == {
        "prefix": "moonish.skipped",
        "content": base64.b64encode(b"*1\r\n$4\r\nPING\r\n\xff").decode(),
    }
    assert ours["source"]["db"] == 7 and ours["source"]["lsn"] == 5
    assert ours["transaction"] == {"id": "2:4", "total_order": 2, "data_collection_order": 2}


def test_transaction_block_matches_debeziums_for_atomic_batches() -> None:
    theirs = debezium("pg_insert")["transaction"]
    ours = envelope(SET, lsn=12, batch=(2, 3))["transaction"]
    assert list(ours) == list(theirs)
    assert ours == {"id": "2:10", "total_order": 3, "data_collection_order": 3}
    assert envelope(SET)["transaction"] is None


def test_bytes_that_are_not_utf8_use_standard_base64_like_debezium() -> None:
    photo = debezium("pg_bytea")["after"]["photo"]
    raw = base64.b64decode(photo)
    assert text_or_b64(raw) == {"_b64": photo} == {"_b64": "SGVsbG8A/4A="}
    ours = envelope(KvCommand(0, (b"SET", raw, b"\xc3\xbc")))
    assert ours["after"]["key"] == {"_b64": photo} and ours["after"]["args"][1] == "ü"


def test_a_utf8_key_that_looks_like_the_marker_stays_a_string() -> None:
    key = b'{"_b64":"AAE="}'
    assert envelope(KvCommand(0, (b"SET", key, b"v")))["after"]["key"] == key.decode()
    assert envelope(KvCommand(0, (b"SET", b"\xff\x01", b"v")))["after"]["key"] == {"_b64": "/wE="}


def test_temporal_and_graph_records() -> None:
    temporal = envelope(TemporalUpsert(b"price", b"1.08", 10, 20))
    assert temporal["op"] == "u" and temporal["after"] == {
        "record_type": "temporal",
        "command": "TEMPORAL.UPSERT",
        "key": "price",
        "value": "1.08",
        "valid_from_ms": 10,
        "system_from_ms": 20,
    }
    graph = envelope(GraphMutation(b"e1", EntityKind.EDGE, 99, 20, b"\xff"))
    assert graph["after"]["entity_kind"] == "edge" and graph["after"]["valid_to_ms"] == 99
    assert graph["after"]["properties"] == {"_b64": "/w=="}
    assert graph["source"]["db"] is None


def test_envelopes_are_compact_single_lines() -> None:
    rtype, payload = encode_payload(SET)
    frame = Frame(1, rtype, 0, 0, 1, 0, payload, 40)
    raw = EnvelopeEncoder(0).encode([frame])[0].envelope
    assert b"\n" not in raw and orjson.loads(raw)["source"]["lsn"] == 1


@pytest.mark.parametrize("commit_us", [0, 999, 1000, -1, -1500, 1_795_000_000_000_001])
def test_source_timestamps_for_any_commit_time(commit_us: int) -> None:
    rtype, payload = encode_payload(SET)
    frame = Frame(1, rtype, 0, 0, 1, commit_us, payload, 40)
    source = orjson.loads(EnvelopeEncoder(0).encode([frame])[0].envelope)["source"]
    assert (source["ts_ms"], source["ts_us"], source["ts_ns"]) == (
        commit_us // 1000,
        commit_us,
        commit_us * 1000,
    )


def test_an_event_batch_is_a_sequence_of_events_over_its_envelopes() -> None:
    frames = []
    for lsn, record in enumerate([SET, DEL, Checkpoint(1, "c")], start=1):
        rtype, payload = encode_payload(record)
        frames.append(Frame(lsn, rtype, 0, 0, 1, 5_000, payload, 40))
    batch = EnvelopeEncoder(0, messages=True).encode(frames)
    assert len(batch) == 3 and [e.op for e in batch] == ["u", "d", "m"]
    assert [e.envelope for e in batch] == batch.envelopes == [e.envelope for e in batch[:]]
    assert batch[-1].record == Checkpoint(1, "c") and batch[1].lsn == 2
    assert "LSN 1..3" in repr(batch)
