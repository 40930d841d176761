"""Encoding: change events as payload-only Debezium JSON envelopes (orjson).

Follows the value layout Debezium's Kafka Connect JsonConverter writes with
``schemas.enable=false`` (Debezium 3.x, "Data change events" in the connector docs), field order
included::

    {"before": {...}|null, "after": {...}|null,
     "source": {"version": "moonish-<v>", "connector": "moonish", "name": <name>,
                "ts_ms": <commit ms>, "ts_us": ..., "ts_ns": ..., "snapshot": "false",
                "db": <Redis db index>|null, "shard": <id>, "lsn": <lsn>},
     "transaction": {"id": "<shard>:<first lsn>", "total_order": n,
                     "data_collection_order": n}|null,
     "op": "u"|"d"|"t", "ts_ms": <produced ms>, "ts_us": ..., "ts_ns": ...}

A checkpoint is not a data change and is shaped like Debezium's logical-decoding message
(``op: "m"``): no ``before``/``after`` at all, and a ``message`` block with ``prefix`` and
base64 ``content``. Byte strings that are not valid UTF-8 become ``{"_b64": "<base64>"}``
(standard alphabet, padded, as Debezium's ``binary.handling.mode=base64``).
docs/envelopes.md has every field, with examples.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

import orjson

from moonish import __version__
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import CorruptionError
from moonish.events import ChangeEvent, kv_op
from moonish.log.format import FLAG_BATCH, RecordType
from moonish.log.frames import Frame
from moonish.log.records import (
    Checkpoint,
    GraphMutation,
    PayloadError,
    TemporalUpsert,
    decode_kv,
    decode_payload,
)

CONNECTOR = "moonish"
SOURCE_VERSION = f"moonish-{__version__}"
CHECKPOINT_PREFIX = "moonish.checkpoint"

_b64encode = base64.b64encode


def text_or_b64(value: bytes) -> str | dict[str, str]:
    """``value`` as a JSON string if it is UTF-8, else ``{"_b64": <standard base64>}``."""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return {"_b64": _b64encode(value).decode("ascii")}


def _image(record: TemporalUpsert | GraphMutation) -> dict[str, Any]:
    if isinstance(record, TemporalUpsert):
        return {
            "record_type": "temporal",
            "command": "TEMPORAL.UPSERT",
            "key": text_or_b64(record.key),
            "value": text_or_b64(record.value),
            "valid_from_ms": record.valid_from_ms,
            "system_from_ms": record.system_from_ms,
        }
    return {
        "record_type": "graph",
        "command": "GRAPH.MUTATE",
        "key": text_or_b64(record.entity_id),
        "entity_kind": record.entity_kind.name.lower(),
        "valid_to_ms": record.valid_to_ms,
        "system_from_ms": record.system_from_ms,
        "properties": text_or_b64(record.properties),
    }


class EnvelopeEncoder:
    """Decodes frames of one shard and encodes them as Debezium envelopes.

    Args:
        shard: the shard id (``source.shard``).
        name: the logical source name (``source.name``; Debezium's topic prefix).
        clock: the processing time stamped as top-level ``ts_ms``/``ts_us``/``ts_ns``, read
            once per ``encode`` call (all envelopes of one call share it).
        path: the shard directory, named in errors.
    """

    def __init__(
        self, shard: int, name: str = CONNECTOR, clock: Clock = SYSTEM_CLOCK, path: str = ""
    ) -> None:
        self.shard = shard
        self.name = name
        self.clock = clock
        self.path = path

    def encode(self, frames: Iterable[Frame]) -> list[ChangeEvent]:
        """Change events for ``frames`` (in the order given), envelopes included.

        Raises:
            CorruptionError: a payload does not follow its record type's grammar (the frame's
                CRC was valid, so the writer that made it is broken or incompatible).
        """
        now_us = self.clock.now_us()
        now_ms, now_ns = now_us // 1000, now_us * 1000
        shard, name = self.shard, self.name
        dumps = orjson.dumps
        events: list[ChangeEvent] = []
        append = events.append
        kv_type = RecordType.KV
        for frame in frames:
            lsn, rtype, flags, bidx, _, commit_us, payload, _ = frame
            try:
                record = decode_kv(payload) if rtype == kv_type else decode_payload(rtype, payload)
            except PayloadError as exc:
                raise CorruptionError(
                    f"undecodable record payload: {exc}",
                    path=self.path,
                    offset=frame.offset,
                    lsn=lsn,
                ) from None
            source = {
                "version": SOURCE_VERSION,
                "connector": CONNECTOR,
                "name": name,
                "ts_ms": commit_us // 1000,
                "ts_us": commit_us,
                "ts_ns": commit_us * 1000,
                "snapshot": "false",
                "db": None,
                "shard": shard,
                "lsn": lsn,
            }
            transaction = (
                {
                    "id": f"{shard}:{lsn - bidx}",
                    "total_order": bidx + 1,
                    "data_collection_order": bidx + 1,
                }
                if flags & FLAG_BATCH
                else None
            )
            if rtype == kv_type:
                argv = record.argv  # type: ignore[union-attr]
                command = argv[0].upper()
                db = record.db  # type: ignore[union-attr]
                key_pos = record.key_pos  # type: ignore[union-attr]
                source["db"] = None if command == b"FLUSHALL" else db
                op = kv_op(command, key_pos)
                if op == "t":
                    before = after = None
                else:
                    image = {
                        "record_type": "kv",
                        "command": command.decode(errors="replace"),
                        "db": db,
                        "key": text_or_b64(argv[key_pos]) if key_pos else None,
                        "args": [text_or_b64(arg) for arg in argv[1:]],
                    }
                    before, after = (image, None) if op == "d" else (None, image)
            elif isinstance(record, Checkpoint):
                content = dumps({"checkpoint_lsn": record.checkpoint_lsn, "label": record.label})
                envelope = {
                    "op": "m",
                    "ts_ms": now_ms,
                    "source": source,
                    "transaction": transaction,
                    "message": {
                        "prefix": CHECKPOINT_PREFIX,
                        "content": _b64encode(content).decode("ascii"),
                    },
                }
                append(ChangeEvent(shard, lsn, "m", record, commit_us, dumps(envelope)))
                continue
            else:
                op, before, after = "u", None, _image(record)  # type: ignore[arg-type]
            envelope = {
                "before": before,
                "after": after,
                "source": source,
                "transaction": transaction,
                "op": op,
                "ts_ms": now_ms,
                "ts_us": now_us,
                "ts_ns": now_ns,
            }
            append(ChangeEvent(shard, lsn, op, record, commit_us, dumps(envelope)))
        return events
