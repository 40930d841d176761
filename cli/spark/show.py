"""``moonish spark show``: rows of a materialized Delta table's current version."""

from __future__ import annotations

import click

from .. import options


@click.command("show")
@click.argument("table_dir", type=click.Path(exists=True, file_okay=False))
@options.limit(help="Most rows.", default=10)
@options.spark_master
def show(table_dir: str, limit: int, master: str) -> None:
    """Print rows of a materialized table's current version, as JSON lines (db, key, type,
    value, expire_at_ms, shard, lsn), ordered by db and key. TABLE_DIR must be a Delta table
    moonish spark materialize made (exit 2 otherwise: not a table, or no micro-batch applied
    yet; exit 5 for a table of moonish's earlier own format or a Delta table of another
    schema).

    Example:

        moonish spark show table --limit 5
    """
    import orjson

    import moonish.spark
    from moonish.cdc.images import text_or_b64
    from moonish.spark.delta import readable_files, require_table

    readable_files(require_table(table_dir))  # before Spark starts: a wrong one fails at once
    spark = moonish.spark.session(master)
    rows = moonish.spark.read_table(spark, table_dir).orderBy("db", "key").limit(limit).collect()
    for row in rows:
        expire_at = row.expire_at
        line = {
            "db": row.db,
            "key": text_or_b64(bytes(row.key)),
            "type": row.type,
            "value": None if row.value is None else orjson.loads(row.value),
            "expire_at_ms": None if expire_at is None else round(expire_at.timestamp() * 1000),
            "shard": row.shard,
            "lsn": row.lsn,
        }
        click.echo(orjson.dumps(line).decode())
