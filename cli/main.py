"""The ``moonish`` command: its groups (``cdc``, ``wal``, ``spark``, ``consumer``), each
command registered in them, and error handling by kind."""

from __future__ import annotations

import contextlib
import os
import select
import sys
from collections.abc import Iterator
from typing import Any

import click

from cli.cdc.export import export
from cli.cdc.info import info
from cli.cdc.kafka import kafka
from cli.cdc.read import read
from cli.cdc.tail import tail
from cli.consumer.ack import ack
from cli.consumer.create import create
from cli.consumer.drop import drop
from cli.consumer.list import list_command
from cli.consumer.seek import seek
from cli.consumer.show import show as show_consumer
from cli.errors import CliError
from cli.serve import serve
from cli.spark.materialize import materialize
from cli.spark.show import show as show_table
from cli.wal.capture import capture_command
from cli.wal.checkpoint import checkpoint
from cli.wal.dump import dump
from cli.wal.import_aof import import_aof_command
from cli.wal.import_rdb import import_rdb_command
from cli.wal.prune import prune
from cli.wal.repair import repair
from cli.wal.retention import retention
from cli.wal.stream import stream
from cli.wal.verify import verify
from moonish.errors import MoonishError
from moonish.version import __version__


class StdoutClosed(Exception):
    """The reader of standard output went away (``moonish cdc read ... | head -1``)."""


class _Root(click.Group):
    """The ``moonish`` group. A write to a closed standard output raises BrokenPipeError;
    click's ``main`` would turn that into exit 1 before :func:`main` could see it, so it is
    raised past click as :class:`StdoutClosed`, from parsing (``--help``, ``--version``) and
    from the commands alike. A broken pipe that is not standard output's (a socket, a child
    process) stays an error."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _stdout_closed_is_an_end():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with _stdout_closed_is_an_end():
            return super().invoke(ctx)


@contextlib.contextmanager
def _stdout_closed_is_an_end() -> Iterator[None]:
    """Raise :class:`StdoutClosed` for a BrokenPipeError of standard output, and any other
    as an error click does not swallow (it would exit 1 without a word)."""
    try:
        yield
    except BrokenPipeError as error:
        if _stdout_closed():
            raise StdoutClosed from error
        raise RuntimeError(f"broken pipe, not standard output's: {error}") from error


def _stdout_closed() -> bool:
    """Whether standard output (descriptor 1) is a pipe or socket whose reader has gone
    (``poll`` reports POLLERR or POLLHUP for it)."""
    poller = select.poll()
    poller.register(1, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _discard_stdout() -> None:
    """Point standard output at /dev/null, so that flushing what is still buffered (also at
    interpreter exit) cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


@click.group(cls=_Root)
@click.version_option(__version__, prog_name="moonish")
def moonish() -> None:
    """moonish: change data capture from segmented write-ahead logs as Debezium envelopes.

    Example:

        moonish cdc read data/shard-0 0 --limit 10
    """


@moonish.group()
def cdc() -> None:
    """Read changes: one batch (read), a stream (tail), files for Spark (export), Kafka (kafka),
    facts (info).

    Example:

        moonish cdc tail data/shard-0 --follow
    """


@moonish.group()
def wal() -> None:
    """Manage logs: import a Redis AOF or RDB, capture a live Redis, verify, dump, repair.

    Example:

        moonish wal verify data
    """


@moonish.group()
def spark() -> None:
    """Run the Spark pipeline: a table of the latest state per key (needs moonish[spark]).

    Example:

        moonish spark materialize data table --checkpoint table-checkpoint
    """


@moonish.group()
def consumer() -> None:
    """Named consumers: per-shard positions that retention keeps the log for. Every command
    takes a data directory or a server's URL (moonish serve; with --token-file, --cacert).

    Example:

        moonish consumer create data export --from earliest
    """


cdc.add_command(read)
cdc.add_command(tail)
cdc.add_command(info)
cdc.add_command(export)
cdc.add_command(kafka)
wal.add_command(import_aof_command)
wal.add_command(import_rdb_command)
wal.add_command(capture_command)
wal.add_command(verify)
wal.add_command(dump)
wal.add_command(checkpoint)
wal.add_command(stream)
wal.add_command(repair)
wal.add_command(retention)
wal.add_command(prune)
consumer.add_command(create)
consumer.add_command(list_command)
consumer.add_command(show_consumer)
consumer.add_command(ack)
consumer.add_command(seek)
consumer.add_command(drop)
moonish.add_command(serve)
spark.add_command(materialize)
spark.add_command(show_table)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the status."""
    try:
        try:
            moonish.main(args=argv, prog_name="moonish", standalone_mode=False)
        except MoonishError as error:
            raise CliError(error) from error
    except click.UsageError as error:
        where = f" (see '{error.ctx.command_path} --help')" if error.ctx else ""
        click.echo(f"moonish: usage: {error.format_message()}{where}", err=True)
        return 2
    except click.ClickException as error:
        click.echo(f"moonish: {error.format_message()}", err=True)
        return error.exit_code
    except (click.Abort, KeyboardInterrupt):
        return 130  # interrupted (cdc tail --follow handles Ctrl-C itself and exits 0)
    except StdoutClosed:  # `moonish cdc read ... | head`: the reader went away, not an error
        _discard_stdout()
        return 0
    return 0


def entry() -> None:
    """Console-script entry point. Exits with :func:`main`'s status; also 0 when standard
    output closes before the last buffered bytes are flushed."""
    status = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
    sys.exit(status)


if __name__ == "__main__":
    entry()
