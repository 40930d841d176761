"""Arrow change rows from frames (moonish.spark.columns), without a Spark session."""

from __future__ import annotations

import pytest

from moonish.errors import CorruptionError
from moonish.log.format import FLAG_BATCH
from moonish.log.frames import Frame
from moonish.log.payloads import encode_payload
from moonish.log.records import Checkpoint, KvChange, KvCommand, Message, Record, ViewType

pytest.importorskip("pyarrow")

from moonish.spark.columns import ARROW_SCHEMA, change_batch

IMAGE = b'{"db":0,"key":"k","type":"string","value":"v","expire_at_ms":null}'


def frame(lsn: int, record: Record, flags: int = 0, batch_index: int = 0) -> Frame:
    record_type, payload = encode_payload(record)
    return Frame(
        lsn, record_type, flags, batch_index, 2 if flags else 1, 1_000_000 * lsn, payload, 100 * lsn
    )


def change(op: str, before: bytes, after: bytes, view: ViewType = ViewType.NEW_IMAGE) -> KvChange:
    return KvChange(op, 3, b"SET", b"k\xff", before, after, view, op == "d")


def test_rows_follow_the_records() -> None:
    frames = [
        frame(1, change("c", b"", IMAGE)),
        frame(2, change("u", b"", IMAGE, ViewType.OFF)),  # stream off: no row
        frame(3, change("d", IMAGE, b""), FLAG_BATCH, 0),
        frame(4, KvCommand(0, (b"SET", b"plain", b"1"), 1), FLAG_BATCH, 1),
    ]
    batch = change_batch(7, frames, "shard-7")
    assert batch.schema == ARROW_SCHEMA
    rows = batch.to_pylist()
    assert [row["lsn"] for row in rows] == [1, 3, 4]
    assert [row["op"] for row in rows] == ["c", "d", "u"]
    assert [row["record_type"] for row in rows] == ["kv_change", "kv_change", "kv"]
    assert rows[0]["key"] == b"k\xff" and rows[0]["db"] == 3 and rows[0]["command"] == "SET"
    assert (rows[0]["before"], rows[0]["after"]) == (None, IMAGE.decode())
    assert (rows[1]["before"], rows[1]["after"], rows[1]["expired"]) == (IMAGE.decode(), None, True)
    assert [row["transaction_id"] for row in rows] == [None, "7:3", "7:3"]
    assert rows[2]["key"] == b"plain" and rows[2]["after"] is not None
    assert rows[1]["commit_ts"].timestamp() == 3.0


def test_messages_and_checkpoints_are_m_rows_without_images_only_when_asked() -> None:
    frames = [frame(1, Message("moonish.function", b"{}", 4)), frame(2, Checkpoint(1, "c"))]
    assert change_batch(0, frames, "shard-0").num_rows == 0
    rows = change_batch(0, frames, "shard-0", messages=True).to_pylist()
    assert [(r["op"], r["record_type"], r["db"]) for r in rows] == [
        ("m", "message", 4),
        ("m", "checkpoint", None),
    ]
    assert all(r["key"] is r["before"] is r["after"] is r["command"] is None for r in rows)


def test_an_image_that_is_not_utf8_is_corruption_at_its_lsn() -> None:
    frames = [frame(1, change("c", b"", IMAGE)), frame(2, change("u", IMAGE, b'"\xff"'))]
    with pytest.raises(CorruptionError) as caught:
        change_batch(0, frames, "shard-0")
    assert (caught.value.lsn, caught.value.offset, caught.value.path) == (2, 200, "shard-0")


def test_a_truncated_payload_is_corruption_at_its_lsn() -> None:
    good = frame(5, change("c", b"", IMAGE))
    cut = good._replace(lsn=6, payload=good.payload[:20], offset=600)
    with pytest.raises(CorruptionError) as caught:
        change_batch(0, [good, cut], "shard-0")
    assert (caught.value.lsn, caught.value.offset) == (6, 600)
