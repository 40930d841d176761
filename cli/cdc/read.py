"""``moonish cdc read``: one batch of envelopes from a cursor or a token (Moon's CDC.READ)."""

from __future__ import annotations

import sys

import click

import moonish.cdc.api
import moonish.cdc.shard_read
from moonish.cdc.cursor import Cursor

from .. import options, remote
from ..params import write_position


# A negative POSITION ("-1") must reach the cursor check and get its message, not "no such option".
@click.command("read", context_settings={"ignore_unknown_options": True})
@click.argument("path", type=remote.DATA_PATH)
@click.argument("position", required=False)
@options.limit(
    help="Most envelopes to print (1..10000; an atomic batch is never cut).",
    default=moonish.cdc.shard_read.DEFAULT_LIMIT,
    maximum=moonish.cdc.shard_read.MAX_LIMIT,
)
@options.source_name
@options.consumer(help="Read from this named consumer's confirmed position.")
@options.ack(help="With --consumer: confirm what was printed.")
@options.cursor_file(
    help="Write the cursor or token to this file (replaced atomically) instead of the first "
    "stdout line, so stdout is pure NDJSON."
)
@options.snapshot(
    help='Start a new consumer of one shard: the newest snapshot\'s keys as op "r", then the '
    "changes after it (POSITION omitted or 0)."
)
@options.transactions(help="Also print Debezium BEGIN/END records around atomic batches.")
@options.messages(
    help='Also print checkpoints and message records (op "m", which have no before or after); '
    "without it they are passed over and the position still moves past them."
)
@options.remote_options
def read(
    path: str,
    position: str | None,
    limit: int,
    name: str,
    consumer: str | None,
    ack: bool,
    cursor_file: str | None,
    snapshot: bool,
    transactions: bool,
    messages: bool,
    token_file: str | None,
    cacert: str | None,
) -> None:
    """Print the next cursor (or token), then up to LIMIT envelopes after POSITION, one per line.

    PATH is one shard's directory or a data directory (shard-0, shard-1, ...). For a shard,
    POSITION is an LSN cursor: 0 reads from the start, and a snapshot cursor
    (snapshot:<lsn>:<row>) continues a --snapshot read. For a data directory, every shard is
    read as one stream in commit-time order and POSITION is a token (m4.d1234.b12.a0.e999),
    `earliest` or `now`. The first line is the position to pass back to continue; when
    nothing is new it equals POSITION and no envelope follows.

    PATH may also be a server's URL (`moonish serve`): the same output, read over HTTP
    (--token-file for its bearer token, --cacert for a self-signed certificate).

    With --consumer, POSITION is the consumer's confirmed position; --ack confirms the
    printed envelopes once they are written (without it, reading again gives them again:
    at-least-once).

    Example:

        moonish cdc read data/shard-0 0 --limit 10

        moonish cdc read data earliest --limit 100 --cursor-file pos | jq .op

        moonish cdc read data --consumer billing --ack

        moonish cdc read http://127.0.0.1:8470 m2.b12.a7 --limit 100
    """
    if ack and consumer is None:
        raise click.UsageError("--ack confirms a consumer's position: give --consumer NAME.")
    if position is None and not snapshot and consumer is None:
        raise click.UsageError("Missing argument 'POSITION'.")
    local_only = ("name", "snapshot", "transactions", "messages")
    client = remote.connect(path, token_file, cacert, local_only)
    if client is not None:
        with client:
            got = client.read(position, limit, consumer=consumer)
            _print(str(got.token), got.events.envelopes, cursor_file)
            if ack and consumer is not None:
                client.ack(consumer, got.token)
        return
    if position is not None and not moonish.cdc.api.merged(path, position, consumer):
        _check_cursor(position)
    result = moonish.cdc.api.read(
        path,
        position,
        limit,
        consumer=consumer,
        name=name,
        snapshot=snapshot,
        transactions=transactions,
        messages=messages,
    )
    if isinstance(result, moonish.cdc.shard_read.ReadResult):
        _print(str(result.cursor), result.events.envelopes, cursor_file)
        return
    _print(str(result.token), result.events.envelopes, cursor_file)
    if ack and consumer is not None:
        moonish.cdc.api.ack(path, consumer, result.token)


def _print(where: str, envelopes: list[bytes], cursor_file: str | None) -> None:
    """The position (first line, or to ``cursor_file`` once the envelopes are out), then the
    envelopes, one per line."""
    out = sys.stdout.buffer
    if cursor_file is None:
        out.write(f"{where}\n".encode())
    if envelopes:
        out.write(b"\n".join(envelopes))
        out.write(b"\n")
    out.flush()
    if cursor_file is not None:
        write_position(cursor_file, where)


def _check_cursor(position: str) -> None:
    """A bad cursor is a usage error naming the argument (exit 2), as before tokens."""
    try:
        Cursor.parse(position)
    except moonish.MoonishError as error:
        raise click.BadParameter(error.message, param_hint="'POSITION'") from None
