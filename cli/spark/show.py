"""``moonish spark show``: rows of a materialized Delta table's current version."""

from __future__ import annotations

import click

from .. import options


@click.command("show")
@click.argument("table_dir", type=click.Path(exists=True, file_okay=False))
@options.limit(help="Most rows.", default=10)
def show(table_dir: str, limit: int) -> None:
    """Print rows of a materialized table's current version, as JSON lines (db, key, type,
    value, expire_at_ms, shard, lsn), ordered by db and key. TABLE_DIR must be a Delta table
    moonish spark materialize made (exit 2 otherwise: not a table, or no micro-batch applied
    yet; exit 5 for a table of moonish's earlier own format or a Delta table of another
    schema). The table is read with delta-rs; Spark is not started.

    Example:

        moonish spark show table --limit 5
    """
    import orjson

    from moonish.cdc.images import text_or_b64
    from moonish.spark.delta import first_rows, require_table

    columns = ("db", "key", "type", "value", "expire_at", "shard", "lsn")
    rows = first_rows(require_table(table_dir), limit, columns)
    for row in rows.to_pylist():
        expire_at = row["expire_at"]  # a datetime in UTC
        line = {
            "db": row["db"],
            "key": text_or_b64(row["key"]),
            "type": row["type"],
            "value": None if row["value"] is None else orjson.loads(row["value"]),
            "expire_at_ms": None if expire_at is None else round(expire_at.timestamp() * 1000),
            "shard": row["shard"],
            "lsn": row["lsn"],
        }
        click.echo(orjson.dumps(line).decode())
