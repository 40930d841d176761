"""What the ``moonish consumer`` commands print: the lag table, JSON lines, and the token a
consumer moved to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import orjson

from moonish.cdc.positions import data_shards, resolve
from moonish.cdc.token import Token
from moonish.datadir import consumers

HEADER = ("CONSUMER", "SHARD", "CONFIRMED", "LATEST", "LAG", "LAG-BYTES", "OLDEST-AGE", "STATUS")


def move(
    how: Callable[[str, str, tuple[int, ...]], consumers.Consumer],
    data_dir: str,
    name: str,
    text: str,
) -> None:
    """Ack or seek consumer ``name`` to ``text`` (a token, earliest or now); print its token."""
    done = how(data_dir, name, resolve(data_shards(data_dir), text).positions)
    print_json({"name": done.name, "token": str(Token(done.positions))})


def print_json(document: dict[str, Any]) -> None:
    click.echo(orjson.dumps(document).decode())


def print_table(table: list[dict[str, Any]], as_json: bool) -> None:
    """Lag entries (``ConsumerLag.to_json``, as local and server give them) as the table,
    or one JSON object each."""
    if as_json:
        for entry in table:
            print_json(entry)
        return
    rows = [HEADER]
    for entry in table:
        for shard in entry["shards"]:
            status = shard["status"] + (f": {shard['reason']}" if shard["reason"] else "")
            age = shard["oldest_unconfirmed_age_ms"]
            rows.append(
                (
                    str(entry["name"]),
                    str(shard["shard"]),
                    str(shard["confirmed_lsn"]),
                    str(shard["latest_lsn"]),
                    str(shard["lag_records"]),
                    str(shard["lag_bytes"]),
                    "-" if age is None else duration(age),
                    status,
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        click.echo("  ".join([*cells, row[-1]]))


def duration(ms: int) -> str:
    """``ms`` as a short duration: ``850ms``, ``12.5s``, ``3m20s``, ``2h05m``, ``3d04h``."""
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
