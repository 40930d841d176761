"""``moonish spark show``: rows of a materialized table's committed version."""

from __future__ import annotations

import click

from .. import options


@click.command("show")
@click.argument("table_dir", type=click.Path(exists=True, file_okay=False))
@options.limit(help="Most rows.", default=10)
@options.spark_master
def show(table_dir: str, limit: int, master: str) -> None:
    """Print rows of a materialized table's committed version, as JSON lines (db, key, type,
    value, expire_at_ms, shard, lsn), ordered by db and key. TABLE_DIR must hold a committed
    version (exit 2 otherwise: not a table, or no micro-batch applied yet).

    Example:

        moonish spark show table --limit 5
    """
    import orjson

    import moonish.spark
    from moonish.cdc.images import text_or_b64
    from moonish.spark.table import require_version

    require_version(table_dir)  # before Spark starts: a wrong directory fails at once
    spark = moonish.spark.session(master)
    rows = moonish.spark.read_table(spark, table_dir).orderBy("db", "key").limit(limit).collect()
    for row in rows:
        image = orjson.loads(row.image) if row.image else {}
        line = {
            "db": row.db,
            "key": text_or_b64(bytes(row.key)),
            "type": row.type,
            "value": image.get("value"),
            "expire_at_ms": row.expire_at_ms,
            "shard": row.shard,
            "lsn": row.lsn,
        }
        click.echo(orjson.dumps(line).decode())
