"""``moonish consumer``: named consumers (create, list, show, ack, seek, drop)."""

from __future__ import annotations

from collections.abc import Callable

import click
import orjson

from moonish.cdc import lag
from moonish.cdc.positions import data_shards, resolve
from moonish.cdc.token import Token
from moonish.log import consumers

DATA_DIR = click.Path(exists=True, file_okay=False)
HEADER = ("CONSUMER", "SHARD", "CONFIRMED", "LATEST", "LAG", "LAG-BYTES", "OLDEST-AGE", "STATUS")


@click.group("consumer")
def consumer() -> None:
    """Named consumers: per-shard positions that retention keeps the log for.

    Example:

        moonish consumer create data export --from earliest
    """


@consumer.command("create")
@click.argument("data_dir", type=DATA_DIR)
@click.argument("name")
@click.option(
    "--from",
    "start",
    default="now",
    show_default=True,
    help="Where it starts: earliest (every retained change), now (changes from now on) or "
    "a token (the changes after it).",
)
@click.option("--owner", default="cli", show_default=True, help="What registers it.")
@click.option("--replace", is_flag=True, help="Replace a consumer of the same name.")
def create(data_dir: str, name: str, start: str, owner: str, replace: bool) -> None:
    """Register consumer NAME in DATA_DIR (a data or shard directory); prints it as JSON.

    From then on retention keeps every change it has not confirmed (`consumer ack`).

    Example:

        moonish consumer create data export --from earliest
    """
    token = resolve(data_shards(data_dir), start)
    made = consumers.create(data_dir, name, token.positions, owner=owner, replace=replace)
    _print_json(lag.describe(data_dir, made.name).to_json())


@consumer.command("list")
@click.argument("data_dir", type=DATA_DIR)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per consumer.")
def list_command(data_dir: str, as_json: bool) -> None:
    """The lag table: per consumer and shard the confirmed and latest LSN, the lag in records
    and bytes, the age of the oldest unconfirmed change, and its status (reserved, extended,
    lost with the reason).

    Example:

        moonish consumer list data
    """
    _print_table(lag.lag_table(data_dir), as_json)


@consumer.command("show")
@click.argument("data_dir", type=DATA_DIR)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(data_dir: str, name: str, as_json: bool) -> None:
    """One consumer's lag, per shard, with its token.

    Example:

        moonish consumer show data export --json
    """
    _print_table([lag.describe(data_dir, name)], as_json)


@consumer.command("ack")
@click.argument("data_dir", type=DATA_DIR)
@click.argument("name")
@click.argument("token")
def ack(data_dir: str, name: str, token: str) -> None:
    """Confirm every change up to TOKEN (positions only move forward; an older token changes
    nothing). Prints the consumer's token after it.

    Example:

        moonish consumer ack data export m4.d1234.b12.a0.e99999
    """
    _move(consumers.ack, data_dir, name, token)


@consumer.command("seek")
@click.argument("data_dir", type=DATA_DIR)
@click.argument("name")
@click.argument("position")
def seek(data_dir: str, name: str, position: str) -> None:
    """Reset consumer NAME to POSITION (earliest, now or a token), back or forward; clears a
    lost status. Prints its token.

    Example:

        moonish consumer seek data export earliest
    """
    _move(consumers.seek, data_dir, name, position)


@consumer.command("drop")
@click.argument("data_dir", type=DATA_DIR)
@click.argument("name")
def drop(data_dir: str, name: str) -> None:
    """Remove consumer NAME: it no longer holds the log.

    Example:

        moonish consumer drop data export
    """
    consumers.drop(data_dir, name)
    _print_json({"name": name, "dropped": True})


def _move(
    how: Callable[[str, str, tuple[int, ...]], consumers.Consumer], data_dir: str, name: str,
    text: str,
) -> None:  # fmt: skip
    """Ack or seek consumer ``name`` to ``text`` (a token, earliest or now); print its token."""
    done = how(data_dir, name, resolve(data_shards(data_dir), text).positions)
    _print_json({"name": done.name, "token": str(Token(done.positions))})


def _print_json(document: dict[str, object]) -> None:
    click.echo(orjson.dumps(document).decode())


def _print_table(table: list[lag.ConsumerLag], as_json: bool) -> None:
    if as_json:
        for entry in table:
            _print_json(entry.to_json())
        return
    rows = [HEADER]
    for entry in table:
        for shard in entry.shards:
            status = shard.status + (f": {shard.reason}" if shard.reason else "")
            age = shard.oldest_unconfirmed_age_ms
            rows.append((entry.consumer.name, str(shard.shard), str(shard.confirmed_lsn),
                         str(shard.latest_lsn), str(shard.lag_records), str(shard.lag_bytes),
                         "-" if age is None else duration(age), status))  # fmt: skip
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
