"""``moonish cdc tail``: envelopes as NDJSON to the end of the log, or forever."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

import moonish.cdc.api
from moonish.cdc.cursor import Cursor
from moonish.cdc.merged import Resolved
from moonish.cdc.merged_read import MergedTail

from .. import options, remote
from ..params import write_position


@click.command("tail")
@click.argument("path", type=remote.DATA_PATH)
@options.from_lsn(
    help="One shard: first LSN to print (default 0: the start of the shard).", default=None
)
@options.from_position(
    "from_token",
    help="A data directory: print the changes after this token, `earliest` (default) or `now`.",
)
@options.consumer(help="Start from this named consumer's confirmed position.")
@options.ack(help="With --consumer: confirm each batch once printed.")
@options.follow(help="Keep waiting for new records (Ctrl-C stops).")
@options.source_name
@click.option(
    "--poll-ms",
    type=click.IntRange(1, 60_000),
    default=1000,
    show_default=True,
    help="With --follow: longest wait without a file-system event before re-checking.",
)
@click.option(
    "--resolved-ms",
    type=click.IntRange(1, 3_600_000),
    help='Also print {"resolved":{"ts_us","ts_ms","token"}} at most this often: no later '
    "change has an earlier commit time.",
)
@options.cursor_file(
    help="After each printed batch, write the position to resume from to this file."
)
@options.snapshot(help='Start with the newest snapshot\'s keys (op "r").')
@options.transactions(help="Also print BEGIN/END records.")
@options.messages(help='Also print checkpoints and message records (op "m").')
@options.remote_options
def tail(
    path: str,
    from_lsn: Cursor | None,
    from_token: str | None,
    consumer: str | None,
    ack: bool,
    follow: bool,
    name: str,
    poll_ms: int,
    resolved_ms: int | None,
    cursor_file: str | None,
    snapshot: bool,
    transactions: bool,
    messages: bool,
    token_file: str | None,
    cacert: str | None,
) -> None:
    """Print envelopes as NDJSON: one shard in LSN order, or a data directory's shards merged
    in commit-time order.

    Without --follow, stops at the current end of the log. With --follow, waits for new
    records, woken by file-system events (watchdog) with a polling fallback, until Ctrl-C,
    which exits with status 0 after flushing what was printed. A position that retention
    removed ends the stream with exit 3 (it never stalls).

    PATH may also be a server's URL (`moonish serve`): the same output over HTTP; with
    --follow a dropped connection or a restarted server is reconnected to, from the last
    change printed (nothing missed, nothing twice). --resolved-ms needs --follow there.

    Example:

        moonish cdc tail data/shard-0 --from-lsn 100 --follow

        moonish cdc tail data --from now --follow --resolved-ms 1000

        moonish cdc tail data --consumer billing --ack --follow

        moonish cdc tail https://cdc.example:8470 --from now --follow --token-file token
    """
    if ack and consumer is None:
        raise click.UsageError("--ack confirms a consumer's position: give --consumer NAME.")
    if from_lsn is not None and (from_token is not None or consumer is not None):
        raise click.UsageError("--from-lsn reads one shard: not with --from or --consumer.")
    local_only = ("from_lsn", "name", "poll_ms", "snapshot", "transactions", "messages")
    client = remote.connect(path, token_file, cacert, local_only)
    if client is not None:
        with (
            client,
            client.tail(
                from_token, consumer=consumer, follow=follow, resolved_ms=resolved_ms
            ) as remote_stream,
        ):
            _print(
                remote_stream,
                lambda: str(remote_stream.token),
                cursor_file,
                None if not ack or consumer is None else lambda where: client.ack(consumer, where),
            )
        return
    position = from_token if from_token is not None else from_lsn
    with moonish.cdc.api.tail(
        path,
        position,
        consumer=consumer,
        follow=follow,
        name=name,
        fallback_poll_ms=poll_ms,
        snapshot=snapshot,
        transactions=transactions,
        resolved_ms=resolved_ms,
        messages=messages,
    ) as stream:
        _print(
            stream,
            lambda: str(stream.token if isinstance(stream, MergedTail) else stream.cursor),
            cursor_file,
            None
            if not ack or consumer is None
            else lambda where: moonish.cdc.api.ack(path, consumer, where),
        )


def _print(
    stream: Any,
    where: Callable[[], str],
    cursor_file: str | None,
    ack: Callable[[str], object] | None,
) -> None:
    """Print each batch (envelopes, or a marker), then write and ack its position; Ctrl-C
    ends it after flushing what was printed."""
    out = sys.stdout.buffer
    try:
        for batch in stream.batches():
            if isinstance(batch, Resolved):
                out.write(batch.to_json() + b"\n")
            elif batch.envelopes:  # (empty: past records of a disabled stream)
                out.write(b"\n".join(batch.envelopes))
                out.write(b"\n")
            out.flush()
            position = where()
            if cursor_file is not None:
                write_position(cursor_file, position)
            if ack is not None:
                ack(position)
    except KeyboardInterrupt:
        out.flush()
