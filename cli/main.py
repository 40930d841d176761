"""The ``moonish`` command: its groups (``cdc``, ``wal``, ``spark``, ``consumer``), each
command registered in them, and error handling by kind."""

from __future__ import annotations

import contextlib
import importlib
import os
import select
import sys
from collections.abc import Iterator
from typing import Any

import click

from moonish.errors import MoonishError
from moonish.version import __version__

from .errors import CliError, LoggedExit


class StdoutClosed(Exception):
    """The reader of standard output went away (``moonish cdc read ... | head -1``)."""


class LazyGroup(click.Group):
    """A group whose commands are imported when one is run or listed, from ``commands``
    (name -> ``"module:attribute"``, the module relative to this package, ``".cdc.read"``:
    the package is ``moonish_cli`` when installed, ``cli`` in the repository): click's
    lazy-loading pattern ("Advanced Groups" in click's docs), so that starting ``moonish cdc
    read`` imports the read command and what it uses, not every command's libraries (the
    server's aiohttp, the Kafka client, Spark)."""

    def __init__(self, *args: Any, commands: dict[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_commands.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, attribute = target.split(":")
        command = getattr(importlib.import_module(module, __package__), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command


class _Root(LazyGroup):
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


@click.group(cls=_Root, commands={"serve": ".serve:serve", "run": ".run:run"})
@click.version_option(__version__, prog_name="moonish")
def moonish() -> None:
    """moonish: change data capture from segmented write-ahead logs as Debezium envelopes.

    Example:

        moonish cdc read data/shard-0 0 --limit 10
    """


@moonish.group(
    cls=LazyGroup,
    commands={
        "read": ".cdc.read:read",
        "tail": ".cdc.tail:tail",
        "info": ".cdc.info:info",
        "export": ".cdc.export:export",
        "kafka": ".cdc.kafka:kafka",
    },
)
def cdc() -> None:
    """Read changes: one batch (read), a stream (tail), files for Spark (export), Kafka (kafka),
    facts (info).

    Example:

        moonish cdc tail data/shard-0 --follow
    """


@moonish.group(
    cls=LazyGroup,
    commands={
        "import-aof": ".wal.import_aof:import_aof_command",
        "import-rdb": ".wal.import_rdb:import_rdb_command",
        "capture": ".wal.capture:capture_command",
        "verify": ".wal.verify:verify",
        "dump": ".wal.dump:dump",
        "checkpoint": ".wal.checkpoint:checkpoint",
        "stream": ".wal.stream:stream",
        "repair": ".wal.repair:repair",
        "retention": ".wal.retention:retention",
        "prune": ".wal.prune:prune",
    },
)
def wal() -> None:
    """Manage logs: import a Redis AOF or RDB, capture a live Redis, verify, dump, repair.

    Example:

        moonish wal verify data
    """


@moonish.group(
    cls=LazyGroup,
    commands={"materialize": ".spark.materialize:materialize", "show": ".spark.show:show"},
)
def spark() -> None:
    """Run the Spark pipeline: a table of the latest state per key (needs moonish[spark]).

    Example:

        moonish spark materialize data table --checkpoint table-checkpoint
    """


@moonish.group(
    cls=LazyGroup,
    commands={
        "create": ".consumer.create:create",
        "list": ".consumer.list:list_command",
        "show": ".consumer.show:show",
        "ack": ".consumer.ack:ack",
        "seek": ".consumer.seek:seek",
        "drop": ".consumer.drop:drop",
    },
)
def consumer() -> None:
    """Named consumers: per-shard positions that retention keeps the log for. Every command
    takes a data directory or a server's URL (moonish serve; with --token-file, --cacert).

    Example:

        moonish consumer create data export --from earliest
    """


@moonish.group(cls=LazyGroup, commands={"check": ".config.check:check"})
def config() -> None:
    """Pipeline files: the TOML file moonish run reads (docs/operations.md).

    Example:

        moonish config check pipeline.toml
    """


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
    except LoggedExit as error:
        return error.exit_code
    except click.ClickException as error:
        from .logs import fatal_line  # (here: a local read that succeeds never loads it)

        cause = error.error if isinstance(error, CliError) else None
        if not fatal_line(error.format_message(), error.exit_code, cause):
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
