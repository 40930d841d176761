"""``moonish consumer``: named consumers (create, list, show, ack, seek, drop), of a data
directory or, by URL, of a ``moonish serve`` server (its ``/v1/consumers``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import orjson

from cli.remote import DATA_PATH, connect, remote_options
from moonish.cdc import lag
from moonish.cdc.positions import data_shards, resolve
from moonish.cdc.token import Token
from moonish.datadir import consumers

HEADER = ("CONSUMER", "SHARD", "CONFIRMED", "LATEST", "LAG", "LAG-BYTES", "OLDEST-AGE", "STATUS")


@click.group("consumer")
def consumer() -> None:
    """Named consumers: per-shard positions that retention keeps the log for. Every command
    takes a data directory or a server's URL (moonish serve; with --token-file, --cacert).

    Example:

        moonish consumer create data export --from earliest
    """


@consumer.command("create")
@click.argument("data_dir", type=DATA_PATH)
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
@remote_options
def create(
    data_dir: str, name: str, start: str, owner: str, replace: bool, token_file: str | None,
    cacert: str | None,
) -> None:  # fmt: skip
    """Register consumer NAME in DATA_DIR (a data or shard directory); prints it as JSON.

    From then on retention keeps every change it has not confirmed (`consumer ack`).

    Example:

        moonish consumer create data export --from earliest
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            _print_json(client.create_consumer(name, start, owner=owner, replace=replace))
        return
    token = resolve(data_shards(data_dir), start)
    made = consumers.create(data_dir, name, token.positions, owner=owner, replace=replace)
    _print_json(lag.describe(data_dir, made.name).to_json())


@consumer.command("list")
@click.argument("data_dir", type=DATA_PATH)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per consumer.")
@remote_options
def list_command(data_dir: str, as_json: bool, token_file: str | None, cacert: str | None) -> None:
    """The lag table: per consumer and shard the confirmed and latest LSN, the lag in records
    and bytes, the age of the oldest unconfirmed change, and its status (reserved, extended,
    lost with the reason).

    Example:

        moonish consumer list data
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            _print_table(client.consumers(), as_json)
        return
    _print_table([entry.to_json() for entry in lag.lag_table(data_dir)], as_json)


@consumer.command("show")
@click.argument("data_dir", type=DATA_PATH)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@remote_options
def show(
    data_dir: str, name: str, as_json: bool, token_file: str | None, cacert: str | None
) -> None:  # fmt: skip
    """One consumer's lag, per shard, with its token.

    Example:

        moonish consumer show data export --json
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            _print_table([client.consumer(name)], as_json)
        return
    _print_table([lag.describe(data_dir, name).to_json()], as_json)


@consumer.command("ack")
@click.argument("data_dir", type=DATA_PATH)
@click.argument("name")
@click.argument("token")
@remote_options
def ack(data_dir: str, name: str, token: str, token_file: str | None, cacert: str | None) -> None:
    """Confirm every change up to TOKEN (positions only move forward; an older token changes
    nothing). Prints the consumer's token after it.

    Example:

        moonish consumer ack data export m4.d1234.b12.a0.e99999
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            _print_json({"name": name, "token": str(client.ack(name, token))})
        return
    _move(consumers.ack, data_dir, name, token)


@consumer.command("seek")
@click.argument("data_dir", type=DATA_PATH)
@click.argument("name")
@click.argument("position")
@remote_options
def seek(
    data_dir: str, name: str, position: str, token_file: str | None, cacert: str | None
) -> None:  # fmt: skip
    """Reset consumer NAME to POSITION (earliest, now or a token), back or forward; clears a
    lost status. Prints its token.

    Example:

        moonish consumer seek data export earliest
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            _print_json({"name": name, "token": str(client.seek(name, position))})
        return
    _move(consumers.seek, data_dir, name, position)


@consumer.command("drop")
@click.argument("data_dir", type=DATA_PATH)
@click.argument("name")
@remote_options
def drop(data_dir: str, name: str, token_file: str | None, cacert: str | None) -> None:
    """Remove consumer NAME: it no longer holds the log.

    Example:

        moonish consumer drop data export
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            client.drop(name)
    else:
        consumers.drop(data_dir, name)
    _print_json({"name": name, "dropped": True})


def _move(
    how: Callable[[str, str, tuple[int, ...]], consumers.Consumer], data_dir: str, name: str,
    text: str,
) -> None:  # fmt: skip
    """Ack or seek consumer ``name`` to ``text`` (a token, earliest or now); print its token."""
    done = how(data_dir, name, resolve(data_shards(data_dir), text).positions)
    _print_json({"name": done.name, "token": str(Token(done.positions))})


def _print_json(document: dict[str, Any]) -> None:
    click.echo(orjson.dumps(document).decode())


def _print_table(table: list[dict[str, Any]], as_json: bool) -> None:
    """Lag entries (``ConsumerLag.to_json``, as local and server give them) as the table,
    or one JSON object each."""
    if as_json:
        for entry in table:
            _print_json(entry)
        return
    rows = [HEADER]
    for entry in table:
        for shard in entry["shards"]:
            status = shard["status"] + (f": {shard['reason']}" if shard["reason"] else "")
            age = shard["oldest_unconfirmed_age_ms"]
            rows.append((str(entry["name"]), str(shard["shard"]), str(shard["confirmed_lsn"]),
                         str(shard["latest_lsn"]), str(shard["lag_records"]),
                         str(shard["lag_bytes"]), "-" if age is None else duration(age),
                         status))  # fmt: skip
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
