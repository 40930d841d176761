"""The optimised encoder against a plain reference: for any kv record, its envelope must equal
``orjson.dumps`` of the envelope built as a dict (the Debezium layout of docs/envelopes.md)."""

from __future__ import annotations

import base64
import struct
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonish import __version__
from moonish.cdc.envelope import EnvelopeEncoder
from moonish.clock import FixedClock
from moonish.errors import CorruptionError
from moonish.log.format import FLAG_BATCH, RecordType
from moonish.log.frames import Frame
from moonish.log.payloads import decode_payload, encode_payload
from moonish.log.records import KvCommand

NOW_US = 1_796_000_000_123_456


def text(value: bytes) -> Any:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return {"_b64": base64.b64encode(value).decode()}


def reference(record: KvCommand, lsn: int, commit_us: int, batch: tuple[int, int] | None) -> bytes:
    command = record.argv[0].upper().decode(errors="replace")
    image = {
        "record_type": "kv",
        "command": command,
        "db": record.db,
        "key": text(record.argv[record.key_pos]) if record.key_pos else None,
        "args": [text(arg) for arg in record.argv[1:]],
    }
    if command in ("DEL", "UNLINK", "GETDEL") or (
        command in ("RENAME", "RENAMENX") and record.key_pos == 1
    ):
        op, before, after = "d", image, None
    elif command in ("FLUSHDB", "FLUSHALL") and record.key_pos == 0:
        op, before, after = "t", None, None
    else:
        op, before, after = "u", None, image
    transaction = None
    if batch is not None:
        index = batch[0]
        transaction = {
            "id": f"3:{lsn - index}",
            "total_order": index + 1,
            "data_collection_order": index + 1,
        }
    return orjson.dumps(
        {
            "before": before,
            "after": after,
            "source": {
                "version": f"moonish-{__version__}",
                "connector": "moonish",
                "name": "srv{1}",
                "ts_ms": commit_us // 1000,
                "ts_us": commit_us,
                "ts_ns": commit_us * 1000,
                "snapshot": "false",
                "db": None if command == "FLUSHALL" else record.db,
                "shard": 3,
                "lsn": lsn,
            },
            "transaction": transaction,
            "op": op,
            "ts_ms": NOW_US // 1000,
            "ts_us": NOW_US,
            "ts_ns": NOW_US * 1000,
        }
    )


arguments = st.one_of(
    st.binary(max_size=12),
    st.text(alphabet=st.characters(codec="ascii"), max_size=12).map(str.encode),
    st.text(max_size=8).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from([b'"q"', b"back\\slash", b"tab\t", b"\x7f", b"{}", b"%d", b"{0}"]),
)
commands = st.sampled_from(
    [b"SET", b"set", b"DEL", b"HDEL", b"RENAME", b"GETDEL", b"FLUSHDB", b"FLUSHALL", b"XADD"]
)


@settings(max_examples=600, deadline=None)
@given(
    command=commands,
    args=st.lists(arguments, min_size=0, max_size=5),
    db=st.integers(0, 65535),
    key_pos=st.integers(0, 5),
    lsn=st.integers(1, 2**40),
    commit_us=st.one_of(st.integers(-(2**40), 2**53), st.sampled_from([0, 999, 1000])),
    batch=st.one_of(st.none(), st.tuples(st.integers(0, 5), st.integers(6, 9))),
)
@pytest.mark.slow
def test_optimised_encoder_equals_the_reference(
    command: bytes,
    args: list[bytes],
    db: int,
    key_pos: int,
    lsn: int,
    commit_us: int,
    batch: tuple[int, int] | None,
) -> None:
    argv = (command, *args)
    record = KvCommand(db, argv, min(key_pos, len(argv) - 1))
    rtype, payload = encode_payload(record)
    flags, (index, size) = (FLAG_BATCH, batch) if batch else (0, (0, 1))
    frame = Frame(lsn + index, rtype, flags, index, size, commit_us, payload, 40)
    encoder = EnvelopeEncoder(3, "srv{1}", FixedClock(NOW_US))
    event = encoder.encode([frame])[0]
    assert event.envelope == reference(record, lsn + index, commit_us, batch)
    assert event.record == record


@settings(max_examples=400, deadline=None)
@given(payload=st.binary(max_size=40), head=st.tuples(st.integers(0, 3), st.integers(0, 4)))
def test_any_kv_payload_encodes_or_raises_corruption(payload: bytes, head: tuple[int, int]) -> None:
    key_pos, argc = head
    data = struct.pack("<HHI", 0, key_pos, argc) + payload
    frame = Frame(1, RecordType.KV, 0, 0, 1, 1000, data, 40)
    try:
        event = EnvelopeEncoder(0).encode([frame])[0]
    except CorruptionError as error:
        assert (error.lsn, error.offset) == (1, 40)
    else:
        assert event.record == decode_payload(RecordType.KV, data)
        assert orjson.loads(event.envelope)["source"]["lsn"] == 1
