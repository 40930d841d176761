"""Debezium's transaction metadata inline in a shard's events: a BEGIN record before an atomic
batch's first record and an END record after its last (docs/envelopes.md, "BEGIN and END
records"; the shapes of Debezium 3.6.3's ``<name>.transaction`` topic,
fixtures/debezium/*txn_*)::

    {"status":"BEGIN","id":"<shard>:<first LSN>","event_count":null,
     "data_collections":null,"ts_ms":<commit ms>}
    {"status":"END","id":"<shard>:<first LSN>","event_count":<batch size>,
     "data_collections":[{"data_collection":"shard-<shard>","event_count":<batch size>}],
     "ts_ms":<commit ms>}

They are built from positions (``batch_index``/``batch_size`` of each frame), so a read that
starts inside a batch gets no BEGIN for it and still gets its END.
"""

from __future__ import annotations

import orjson

from moonish.cdc.events import EventBatch
from moonish.log.format import FLAG_BATCH
from moonish.log.frames import Frame


def with_transactions(
    shard: int,
    frames: list[Frame],
    ops: list[str],
    envelopes: list[bytes],
    shown: list[bool | None] | None,
) -> EventBatch:
    """The events of ``frames`` with BEGIN and END records (ops ``"BEGIN"``/``"END"``, their
    frame the batch's first or last record's) around every atomic batch, in order.

    Args:
        shard: the shard id (the transaction id's prefix).
        frames, ops, envelopes: the frames, and the op and envelope of each frame that has an
            event, in order.
        shown: per frame, ``True`` when it has an event, ``False`` for a message left out
            (its batch keeps its BEGIN and END), ``None`` for a record of a disabled stream
            (no event and no BEGIN or END); ``None``: every frame has an event.
    """
    out_frames: list[Frame] = []
    out_ops: list[str] = []
    out_envelopes: list[bytes] = []
    collection = orjson.dumps(f"shard-{shard}").decode()
    event = 0
    for i, frame in enumerate(frames):
        kind = True if shown is None else shown[i]
        if kind is None:
            continue
        batched = frame.flags & FLAG_BATCH
        txn_id = f'"{shard}:{frame.lsn - frame.batch_index}"'
        ts_ms = frame.commit_us // 1000
        if batched and frame.batch_index == 0:
            out_frames.append(frame)
            out_ops.append("BEGIN")
            out_envelopes.append(
                f'{{"status":"BEGIN","id":{txn_id},"event_count":null,'
                f'"data_collections":null,"ts_ms":{ts_ms}}}'.encode()
            )
        if kind:
            out_frames.append(frame)
            out_ops.append(ops[event])
            out_envelopes.append(envelopes[event])
            event += 1
        if batched and frame.batch_index == frame.batch_size - 1:
            count = frame.batch_size
            out_frames.append(frame)
            out_ops.append("END")
            out_envelopes.append(
                f'{{"status":"END","id":{txn_id},"event_count":{count},'
                f'"data_collections":[{{"data_collection":{collection},'
                f'"event_count":{count}}}],"ts_ms":{ts_ms}}}'.encode()
            )
    return EventBatch(shard, out_frames, out_ops, out_envelopes)
