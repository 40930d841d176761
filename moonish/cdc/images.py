"""The images of an envelope's ``before`` and ``after`` beyond what the writer stored: a stored
image whose value was left out, as an envelope carries it, and the command-shaped image of a
plain kv, temporal or graph record (docs/envelopes.md, "Plain kv records"; docs/images.md).
"""

from __future__ import annotations

import base64
import re
from typing import Any

from moonish.log.records import GraphMutation, KvCommand, TemporalUpsert

_b64encode = base64.b64encode


def text_or_b64(value: bytes) -> str | dict[str, str]:
    """``value`` as a JSON string if it is UTF-8, else ``{"_b64": <standard base64>}``."""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return {"_b64": _b64encode(value).decode("ascii")}


_OMITTED = re.compile(rb',"value":\{"_omitted_length":(\d+)\},"expire_at_ms":(null|-?\d+)\}$')


def omitted_out(image: bytes) -> bytes:
    """A stored image whose value was left out (``"value": {"_omitted_length": n}``,
    moonish.values.model) as an envelope carries it: ``"value": null`` and the length in a
    field of its own, ``"omitted_length": n``, after ``expire_at_ms``, so that ``value`` never
    changes JSON type between the ``before`` and ``after`` of one key (docs/images.md). The
    pattern is anchored at the image's end, where only the image's own fields can be (text in
    keys and values has its quotes escaped)."""
    found = _OMITTED.search(image)
    if found is None:
        return image
    return b'%s,"value":null,"expire_at_ms":%s,"omitted_length":%s}' % (
        image[: found.start()],
        found[2],
        found[1],
    )


def command_image(record: KvCommand | TemporalUpsert | GraphMutation) -> dict[str, Any]:
    """The command-shaped ``after``/``before`` image of a plain kv, temporal or graph record
    (docs/envelopes.md, "Plain kv records")."""
    if isinstance(record, KvCommand):
        return {
            "record_type": "kv",
            "command": record.command.upper().decode(errors="replace"),
            "db": record.db,
            "key": text_or_b64(record.argv[record.key_pos]) if record.key_pos else None,
            "args": [text_or_b64(arg) for arg in record.argv[1:]],
        }
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
