"""``moonish spark show``: rows of a materialized Delta table's current version."""

from __future__ import annotations

import click

from .. import options


@click.command("show")
@click.argument("table")
@options.limit(help="Most rows.", default=10)
@options.storage_option
def show(table: str, limit: int, storage_option: tuple[str, ...]) -> None:
    """Print rows of a materialized table's current version, as JSON lines (db, key, type,
    value, expire_at_ms, shard, lsn), ordered by db and key. TABLE must be a Delta table
    moonish spark materialize made (exit 2 otherwise: not a table, or no micro-batch applied
    yet; exit 5 for a table of moonish's earlier own format or a Delta table of another
    schema): a local directory, or s3://BUCKET/PATH with the AWS environment variables or
    --storage-option (exit 2 for a missing bucket or refused credentials, 6 for an endpoint
    that cannot be reached). The table is read with delta-rs; Spark is not started.

    Example:

        moonish spark show table --limit 5

        moonish spark show s3://lake/redis --storage-option AWS_REGION=eu-west-1
    """
    import orjson

    from moonish.cdc.images import text_or_b64
    from moonish.spark.delta import first_rows, require_table
    from moonish.spark.storage import parse_options, table_uri

    columns = ("db", "key", "type", "value", "expire_at", "shard", "lsn")
    delta_table = require_table(table_uri(table), parse_options(storage_option))
    rows = first_rows(delta_table, limit, columns)
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
