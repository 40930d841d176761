"""Record keys and values for Kafka: payload-only JSON, or Kafka Connect's ``JsonConverter``
form with ``schemas.enable=true`` (``{"schema": ..., "payload": ...}``).

Follows Kafka Connect 4.x ``org.apache.kafka.connect.json.JsonConverter`` (the ``schema``
object: ``type``, ``fields``, ``optional``, ``name``, ``version``, ``parameters``, ``field``)
and Debezium 3.6's change-event layout (``fixtures/debezium/``, "Data change events" in the
connector docs): an envelope schema named ``<topic>.Envelope`` (version 2) with ``before``,
``after``, ``source``, ``transaction`` (``event.block``), ``op``, ``ts_ms``, ``ts_us``,
``ts_ns``; transaction records keyed and valued as Debezium's
``io.debezium.connector.common.TransactionMetadataKey``/``Value``.

The row (``before``/``after``, schema ``<topic>.Value``) is one stable struct per topic, so
nothing changes JSON type from record to record::

    db             int32                       the Redis database index
    key            string                      the key: text, or base64 (key_encoding)
    key_encoding   string                      "utf8" | "base64"
    type           string, optional            "string" | "hash" | ... (null: KEYS_ONLY)
    value          string, optional            the image's value as JSON text
                                               (io.debezium.data.Json, Debezium's jsonb form)
    expire_at_ms   int64, optional             io.debezium.time.Timestamp
    omitted_length int64, optional             Redis's length of a value left out (images.md)

docs/kafka.md has the examples.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from moonish.values.model import is_plain

UTF8, BASE64 = "utf8", "base64"


def _field(field_name: str, kind: str, optional: bool, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "optional": optional, **extra, "field": field_name}


def _int64(name: str, optional: bool = True) -> dict[str, Any]:
    return _field(name, "int64", optional)


def _string(name: str, optional: bool = False) -> dict[str, Any]:
    return _field(name, "string", optional)


def key_text(key: bytes) -> tuple[str, str]:
    """``(text, key_encoding)``: the key as UTF-8 text, else its standard base64."""
    try:
        return key.decode(), UTF8
    except UnicodeDecodeError:
        return base64.b64encode(key).decode("ascii"), BASE64


def key_payload(db: int, key: bytes) -> bytes:
    """The payload-only record key of a row: ``{"db": <db>, "key": <text>, "key_encoding":
    "utf8"|"base64"}`` (a binary key and a UTF-8 key that looks like base64 never collide)."""
    if is_plain(key):
        return b'{"db":%d,"key":"%s","key_encoding":"utf8"}' % (db, key)
    text, encoding = key_text(key)
    return orjson.dumps({"db": db, "key": text, "key_encoding": encoding})


def _row_schema(topic: str, field: str) -> dict[str, Any]:
    fields = [
        _field("db", "int32", False),
        _string("key"),
        _string("key_encoding"),
        _string("type", True),
        _field("value", "string", True, name="io.debezium.data.Json", version=1),
        _field("expire_at_ms", "int64", True, name="io.debezium.time.Timestamp", version=1),
        _int64("omitted_length"),
    ]
    return {
        "type": "struct",
        "fields": fields,
        "optional": True,
        "name": f"{topic}.Value",
        "field": field,
    }


SNAPSHOT_ENUM = {
    "type": "string",
    "optional": True,
    "name": "io.debezium.data.Enum",
    "version": 1,
    "parameters": {
        "allowed": "true,first,first_in_data_collection,last_in_data_collection,"
        "last,false,incremental"
    },
    "default": "false",
    "field": "snapshot",
}
SOURCE_SCHEMA = {
    "type": "struct",
    "fields": [
        _string("version"),
        _string("connector"),
        _string("name"),
        _int64("ts_ms", False),
        _int64("ts_us"),
        _int64("ts_ns"),
        SNAPSHOT_ENUM,
        _field("db", "int32", True),
        _field("shard", "int32", False),
        _int64("lsn", False),
        _string("command", True),
        _field("expired", "boolean", True),
    ],
    "optional": False,
    "name": "moonish.Source",
    "version": 1,
    "field": "source",
}
"""``source`` in moonish's field order (docs/envelopes.md)."""
TRANSACTION_BLOCK = {
    "type": "struct",
    "fields": [_string("id"), _int64("total_order", False), _int64("data_collection_order", False)],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}
TRANSACTION_KEY_SCHEMA = {
    "type": "struct",
    "fields": [_string("id")],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataKey",
    "version": 1,
}
TRANSACTION_VALUE_SCHEMA = {
    "type": "struct",
    "fields": [
        _string("status"),
        _string("id"),
        _int64("event_count"),
        {
            "type": "array",
            "items": {
                "type": "struct",
                "fields": [_string("data_collection"), _int64("event_count", False)],
                "optional": True,
                "name": "event.collection",
                "version": 1,
            },
            "optional": True,
            "field": "data_collections",
        },
        _int64("ts_ms", False),
    ],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "version": 1,
}
MESSAGE_KEY_SCHEMA = {
    "type": "struct",
    "fields": [_string("prefix", True)],
    "optional": False,
    "name": "moonish.MessageKey",
    "version": 1,
}
MESSAGE_VALUE_SCHEMA = {
    "type": "struct",
    "fields": [
        _string("op"),
        _int64("ts_ms"),
        SOURCE_SCHEMA,
        TRANSACTION_BLOCK,
        {
            "type": "struct",
            "fields": [_string("prefix", True), _field("content", "bytes", True)],
            "optional": False,
            "name": "moonish.Message",
            "version": 1,
            "field": "message",
        },
    ],
    "optional": False,
    "name": "moonish.MessageValue",
    "version": 1,
}
"""Debezium's logical-decoding message value (PostgreSQL's ``MessageValue``) for ``op: m``."""


def envelope_schema(topic: str) -> dict[str, Any]:
    """The Connect schema of a data topic's change events: ``<topic>.Envelope``."""
    return {
        "type": "struct",
        "fields": [
            _row_schema(topic, "before"),
            _row_schema(topic, "after"),
            SOURCE_SCHEMA,
            TRANSACTION_BLOCK,
            _string("op"),
            _int64("ts_ms"),
            _int64("ts_us"),
            _int64("ts_ns"),
        ],
        "optional": False,
        "name": f"{topic}.Envelope",
        "version": 2,
    }


def key_schema(topic: str) -> dict[str, Any]:
    """The Connect schema of a data topic's record keys: ``<topic>.Key``."""
    fields = [_field("db", "int32", False), _string("key"), _string("key_encoding")]
    return {"type": "struct", "fields": fields, "optional": False, "name": f"{topic}.Key"}


def row(image: dict[str, Any] | None) -> dict[str, Any] | None:
    """An image (docs/images.md) as a row of the stable row schema. A command-shaped image of
    a plain kv, temporal or graph record (docs/envelopes.md) has ``type`` ``kv``/``temporal``
    /``graph`` and the whole image as ``value``."""
    if image is None:
        return None
    key = image.get("key")
    if isinstance(key, dict):
        text, encoding = str(key.get("_b64", "")), BASE64
    else:
        text, encoding = ("" if key is None else str(key)), UTF8
    value: str | None
    if "record_type" in image:
        kind, value = image["record_type"], orjson.dumps(image).decode()
    else:
        kind = image.get("type")
        raw = image.get("value")
        value = None if raw is None else orjson.dumps(raw).decode()
    return {
        "db": image.get("db") or 0,
        "key": text,
        "key_encoding": encoding,
        "type": kind,
        "value": value,
        "expire_at_ms": image.get("expire_at_ms"),
        "omitted_length": image.get("omitted_length"),
    }


class SchemaForm:
    """Builds ``schemas.enable=true`` keys and values; each topic's schema JSON is made once."""

    def __init__(self) -> None:
        self._schemas: dict[tuple[str, str], bytes] = {}

    def _wrap(self, kind: str, topic: str, schema: dict[str, Any], payload: bytes) -> bytes:
        cached = self._schemas.get((kind, topic))
        if cached is None:
            cached = self._schemas[(kind, topic)] = orjson.dumps(schema)
        return b'{"schema":' + cached + b',"payload":' + payload + b"}"

    def change_value(self, topic: str, envelope: bytes) -> bytes:
        """A change envelope with ``before``/``after`` as rows, under ``<topic>.Envelope``."""
        event = orjson.loads(envelope)
        event["before"], event["after"] = row(event.get("before")), row(event.get("after"))
        return self._wrap("value", topic, envelope_schema(topic), orjson.dumps(event))

    def change_key(self, topic: str, key_json: bytes) -> bytes:
        """A row key (:func:`key_payload`) under ``<topic>.Key``."""
        return self._wrap("key", topic, key_schema(topic), key_json)

    def non_data(self, kind: str, key_json: bytes, envelope: bytes) -> tuple[bytes, bytes]:
        """(key, value) of a ``"transaction"`` record (BEGIN/END) or a ``"message"`` (op
        ``m``), under Debezium's transaction metadata schemas or the message schemas."""
        key_schema, value_schema = NON_DATA_SCHEMAS[kind]
        return (
            self._wrap("key", "\0" + kind, key_schema, key_json),
            self._wrap("value", "\0" + kind, value_schema, envelope),
        )


NON_DATA_SCHEMAS = {
    "transaction": (TRANSACTION_KEY_SCHEMA, TRANSACTION_VALUE_SCHEMA),
    "message": (MESSAGE_KEY_SCHEMA, MESSAGE_VALUE_SCHEMA),
}
