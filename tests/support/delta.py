"""What a Delta table's log says, read from its JSON commits (Delta protocol, "Actions"), and
the rows a MERGE takes, built from latest-change rows as Spark's ``latest_changes`` gives them
(pyarrow imported only by :func:`table_rows`, for the tests that skip without it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson


def txn_versions(table: Path, app_id: str) -> list[int]:
    """The versions (batch ids) of ``app_id``'s ``txn`` actions in the table's log, in commit
    order: one per commit that carried one."""
    versions = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_bytes().splitlines():
            action = orjson.loads(line)
            if "txn" in action and action["txn"]["appId"] == app_id:
                versions.append(action["txn"]["version"])
    return versions


def uncommit(checkpoint: Path, batch_id: int) -> None:
    """Undo Spark's commit of ``batch_id`` in a streaming checkpoint (as if Spark crashed
    after the sink committed the batch to the table, before Spark did): the next run replays
    the batch with the same id and offsets."""
    os.remove(checkpoint / "commits" / str(batch_id))
    os.remove(checkpoint / "commits" / f".{batch_id}.crc")


def table_rows(*changes: dict[str, Any], buckets: int) -> Any:
    """The MERGE rows (``moonish.spark.tablerows.MERGE_SCHEMA``, a ``pyarrow.Table``) of
    latest-change rows: dicts of ``db, key, shard, lsn, commit_ts, deleted, image``."""
    import pyarrow as pa

    from moonish.spark.tablerows import merge_rows

    schema = pa.schema(
        [
            ("db", pa.int32()),
            ("key", pa.binary()),
            ("shard", pa.int32()),
            ("lsn", pa.int64()),
            ("commit_ts", pa.timestamp("us", tz="UTC")),
            ("deleted", pa.bool_()),
            ("image", pa.string()),
        ]
    )
    return merge_rows(pa.Table.from_pylist(list(changes), schema), buckets)
