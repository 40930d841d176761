"""The click options that more than one command takes, each defined once here.

A plain decorator (``@options.no_consumer``) is an option every command that takes it words
the same; a factory (``@options.consumer(help=...)``) is one whose help text, and sometimes
default, each command words for what it does with it. The stacks (``remote_options``,
``shard_options``) are the blocks of options that go together.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from moonish.log.format import SEGMENT_HEADER_BYTES
from moonish.log.options import DEFAULT_SEGMENT_BYTES
from moonish.slots import SLOT_COUNT  # every shard owns at least one slot
from moonish.state.config import (
    DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_SNAPSHOT_EVERY_BYTES,
    DEFAULT_SNAPSHOT_EVERY_RECORDS,
    DEFAULT_SNAPSHOT_EVERY_S,
    DEFAULT_SNAPSHOT_ON_CLOSE_RECORDS,
)

from .params import BYTES, FORMAT_VARIABLE, KEY_PATTERN, LOG_FORMATS, LSN, VIEW

F = TypeVar("F", bound=Callable[..., Any])


def stack(command: F, options: list[Callable[[F], F]]) -> F:
    """Apply click options to ``command`` so that ``--help`` lists them in this order."""
    for option in reversed(options):
        command = option(command)
    return command


# Reading: cdc read, tail, export, kafka and spark materialize.


def source_name(command: F) -> F:
    """``--name``: ``source.name`` in the envelopes."""
    option = click.option(
        "--name", default="moonish", show_default=True, help="source.name in envelopes."
    )
    return option(command)


def consumer(help: str) -> Callable[[F], F]:
    """``--consumer NAME``: the named consumer a command reads from or registers as."""
    return click.option("--consumer", help=help)


def no_consumer(command: F) -> F:
    """``--no-consumer``: a sink that does not register as a named consumer."""
    option = click.option(
        "--no-consumer", is_flag=True, help="Do not register as a named consumer."
    )
    return option(command)


def ack(help: str) -> Callable[[F], F]:
    """``--ack``: confirm the named consumer's position after printing."""
    return click.option("--ack", is_flag=True, help=help)


def follow(help: str, *, short: bool = True) -> Callable[[F], F]:
    """``--follow`` (and ``-f`` unless ``short`` is false): keep going past the end of the
    log until stopped."""
    decls = ("--follow", "-f") if short else ("--follow",)
    return click.option(*decls, is_flag=True, help=help)


def cursor_file(help: str) -> Callable[[F], F]:
    """``--cursor-file FILE``: where the position to continue from is written."""
    return click.option("--cursor-file", type=click.Path(dir_okay=False), help=help)


def snapshot(help: str) -> Callable[[F], F]:
    """``--snapshot``: start with the newest snapshot's keys as op "r" rows."""
    return click.option("--snapshot", is_flag=True, help=help)


def transactions(help: str) -> Callable[[F], F]:
    """``--transactions``: also print BEGIN/END records around atomic batches."""
    return click.option("--transactions", is_flag=True, help=help)


def messages(help: str) -> Callable[[F], F]:
    """``--messages``: also print checkpoints and message records (``op: "m"``)."""
    return click.option("--messages", is_flag=True, help=help)


def from_lsn(help: str, default: int | None) -> Callable[[F], F]:
    """``--from-lsn LSN``: where one shard is read from (a default other than None is shown)."""
    shown: dict[str, Any] = {} if default is None else {"show_default": True}
    return click.option("--from-lsn", type=LSN, default=default, help=help, **shown)


def from_position(dest: str, help: str, default: str | None = None) -> Callable[[F], F]:
    """``--from``: a token, ``earliest`` or ``now``, passed to the command as ``dest``."""
    given: dict[str, Any] = {} if default is None else {"default": default, "show_default": True}
    return click.option("--from", dest, help=help, **given)


def limit(help: str, default: int | None, maximum: int | None = None) -> Callable[[F], F]:
    """``--limit N``: the most a command prints, at least 1 (a default other than None is
    shown)."""
    shown: dict[str, Any] = {} if default is None else {"show_default": True}
    return click.option(
        "--limit", type=click.IntRange(1, maximum), default=default, help=help, **shown
    )


# Servers: the client side of cdc read, tail, info and consumer, and serve itself.


def token_file(help: str) -> Callable[[F], F]:
    """``--token-file FILE``: a file holding a server's bearer token."""
    return click.option("--token-file", type=click.Path(exists=True, dir_okay=False), help=help)


def cacert(command: F) -> F:
    """``--cacert FILE``: the certificates an https client trusts."""
    option = click.option(
        "--cacert",
        type=click.Path(exists=True, dir_okay=False),
        help="With an https URL: PEM certificates to trust (a self-signed server's).",
    )
    return option(command)


def remote_options(command: F) -> F:
    """``--token-file`` and ``--cacert``, for a PATH that is a URL (``cli.remote.connect``)."""
    client_token = token_file(
        help="With a URL: a file whose first line is the server's bearer token."
    )
    return stack(command, [client_token, cacert])


# Writing shards: wal import-aof, import-rdb, capture and stream.


def shards(command: F) -> F:
    """``--shards N``: how many shards a command creates."""
    option = click.option(
        "--shards",
        type=click.IntRange(1, SLOT_COUNT),
        required=True,
        help="Number of shards; keys go to shard slot * N // 16384.",
    )
    return option(command)


def view(help: str, default: str | None = None) -> Callable[[F], F]:
    """``--view TYPE``: a stream view type (a default is shown)."""
    given: dict[str, Any] = {} if default is None else {"default": default, "show_default": True}
    return click.option("--view", type=VIEW, help=help, **given)


def max_value_bytes(help: str, default: int | None = None) -> Callable[[F], F]:
    """``--max-value-bytes N``: values whose JSON is larger are left out of images (a
    default is shown)."""
    given: dict[str, Any] = {} if default is None else {"default": default, "show_default": True}
    return click.option("--max-value-bytes", type=click.IntRange(0, None), help=help, **given)


def segment_bytes(command: F) -> F:
    """``--segment-bytes N``: the size at which a writer rotates to a new segment."""
    option = click.option(
        "--segment-bytes",
        type=click.IntRange(SEGMENT_HEADER_BYTES + 1, None),
        default=DEFAULT_SEGMENT_BYTES,
        show_default=True,
        help="Rotate to a new segment before one would grow past this many bytes (a batch "
        "larger than this gets a segment of its own).",
    )
    return option(command)


def shard_options(command: F) -> F:
    """The options of every command that creates shards: ``--shards``, ``--view``,
    ``--max-value-bytes``, ``--segment-bytes`` (existing shards keep their own stream
    configuration; ``--segment-bytes`` applies to every writer the command opens)."""
    new_view = view(
        help="Stream view type of shards this command creates (OFF: no change stream).",
        default="NEW_AND_OLD_IMAGES",
    )
    new_max_value_bytes = max_value_bytes(
        help="In shards this command creates, a value whose JSON is larger is left out of "
        'images: envelopes carry "value": null, "omitted_length": n.',
        default=DEFAULT_MAX_VALUE_BYTES,
    )
    return stack(command, [shards, new_view, new_max_value_bytes, segment_bytes])


def snapshot_policy(command: F) -> F:
    """``--snapshot-every-records N``, ``--snapshot-every-bytes N``,
    ``--snapshot-every-seconds S``, ``--snapshot-on-close-records N``: when the writers take
    snapshots on their own, passed to the command as ``snapshots`` (a ``SnapshotPolicy``;
    docs/images.md, "Snapshots and recovery")."""

    @functools.wraps(command)
    def with_policy(
        *args: Any,
        snapshot_every_records: int,
        snapshot_every_bytes: int,
        snapshot_every_seconds: int,
        snapshot_on_close_records: int,
        **kwargs: Any,
    ) -> Any:
        from moonish.state.autosnapshot import SnapshotPolicy

        kwargs["snapshots"] = SnapshotPolicy(
            snapshot_every_records,
            snapshot_every_bytes,
            snapshot_every_seconds,
            snapshot_on_close_records,
        )
        return command(*args, **kwargs)

    rules: list[Callable[[F], F]] = [
        click.option(
            "--snapshot-every-records",
            type=click.IntRange(min=0),
            default=DEFAULT_SNAPSHOT_EVERY_RECORDS,
            show_default=True,
            help="Each writer takes a snapshot in the background after this many records "
            "(or as many as its keyspace holds keys, when that is more); 0: not by records.",
        ),
        click.option(
            "--snapshot-every-bytes",
            type=click.IntRange(min=0),
            default=DEFAULT_SNAPSHOT_EVERY_BYTES,
            show_default=True,
            help="... or after this many bytes of log; 0: not by bytes.",
        ),
        click.option(
            "--snapshot-every-seconds",
            type=click.IntRange(min=0),
            default=DEFAULT_SNAPSHOT_EVERY_S,
            show_default=True,
            help="... or after this many seconds with any record; 0: not by time (all three "
            "0: only when asked for, moonish wal checkpoint).",
        ),
        click.option(
            "--snapshot-on-close-records",
            type=click.IntRange(min=0),
            default=DEFAULT_SNAPSHOT_ON_CLOSE_RECORDS,
            show_default=True,
            help="A writer that closes cleanly writes a snapshot when at least this many "
            "records (and an eighth of its keys) came since the last one, so the next start "
            "replays none; 0: never.",
        ),
    ]
    return stack(cast(F, with_policy), rules)


def key_filter(command: F) -> F:
    """``--include-keys``, ``--exclude-keys`` (Redis glob patterns, repeatable), ``--dbs``,
    ``--types``, ``--exclude-commands`` (repeatable): the source filter, passed to the
    command as ``key_filter`` (a ``FilterSpec``; moonish.redis.routing.keyfilter,
    docs/filters.md)."""

    @functools.wraps(command)
    def with_filter(
        *args: Any,
        include_keys: tuple[str, ...],
        exclude_keys: tuple[str, ...],
        dbs: tuple[int, ...],
        types: tuple[str, ...],
        exclude_commands: tuple[str, ...],
        **kwargs: Any,
    ) -> Any:
        from moonish.redis.routing.keyfilter import filter_spec

        kwargs["key_filter"] = filter_spec(
            include_keys, exclude_keys, dbs or None, types or None, exclude_commands
        )
        return command(*args, **kwargs)

    rules: list[Callable[[F], F]] = [
        click.option(
            "--include-keys",
            multiple=True,
            type=KEY_PATTERN,
            metavar="PATTERN",
            help="Keep only keys matching one of these Redis glob patterns (as SCAN MATCH "
            "reads them; repeatable). Keys left out never reach the keyspace or the log. The "
            "filter is stored with DATA_DIR, which refuses another one later.",
        ),
        click.option(
            "--exclude-keys",
            multiple=True,
            type=KEY_PATTERN,
            metavar="PATTERN",
            help="Leave out keys matching any of these Redis glob patterns (repeatable).",
        ),
        click.option(
            "--dbs",
            multiple=True,
            type=click.IntRange(0, 15),
            help="Keep only these dbs (repeatable; default: all).",
        ),
        click.option(
            "--types",
            multiple=True,
            type=click.Choice(["string", "hash", "list", "set", "zset", "stream"]),
            help="Keep only keys of these Redis types (repeatable; default: all; zset needs "
            "set). An AOF import or a capture with it runs in one process.",
        ),
        click.option(
            "--exclude-commands",
            multiple=True,
            metavar="NAME",
            help="Leave the changes of these commands out of the stream (FLUSHALL, DEL, ...; "
            "repeatable); the keyspace still follows them, so later images stay true, and a "
            "moonish.filtered message in the log stands for each.",
        ),
    ]
    return stack(cast(F, with_filter), rules)


def retention_policy(command: F) -> F:
    """``--retention-max-bytes``, ``--retention-max-age-ms``, ``--retention-max-records``,
    ``--retention-min-age-ms``, ``--retention-max-pinned-bytes``: the rules of every shard's
    retention policy to set as the writers open (``moonish wal retention``'s, which cannot
    change a shard a writer holds), passed as ``retention`` (the rules given, by name)."""

    @functools.wraps(command)
    def with_retention(*args: Any, **kwargs: Any) -> Any:
        given = {}
        for name in _RETENTION_RULES:
            value = kwargs.pop(f"retention_{name}")
            if value is not None:
                given[name] = value
        kwargs["retention"] = given
        return command(*args, **kwargs)

    helps = {
        "max_bytes": "Retention: delete a shard's oldest segments past this size (512M, 10G).",
        "max_age_ms": "Retention: delete segments whose newest record is older.",
        "max_records": "Retention: keep at most this many LSNs per shard.",
        "min_age_ms": "Retention: never delete a segment younger than this.",
        "max_pinned_bytes": "Retention: the most consumers may hold beyond the rest; past it "
        "the laggiest is marked lost.",
    }
    rules: list[Callable[[F], F]] = [
        click.option(
            f"--retention-{name.replace('_', '-')}",
            type=BYTES if name.endswith("bytes") else click.IntRange(0),
            default=None,
            help=helps[name]
            + (
                " Set as the writers open (a rule not given keeps its stored value; moonish "
                "wal retention shows them; docs/consumers.md)."
                if name == "max_bytes"
                else ""
            ),
        )
        for name in _RETENTION_RULES
    ]
    return stack(cast(F, with_retention), rules)


_RETENTION_RULES = ("max_bytes", "max_age_ms", "max_records", "min_age_ms", "max_pinned_bytes")


def processes(help: str) -> Callable[[F], F]:
    """``--processes N``: how many processes write the shards (default 1)."""
    return click.option(
        "--processes", type=click.IntRange(min=1), default=1, show_default=True, help=help
    )


# Long-running commands: wal capture, import-aof, import-rdb, cdc kafka, serve, spark
# materialize and run.


def _remember_log_format(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Note the command's log format, so that an error it ends with is written in it
    (cli.main; cli.logs.fatal_line)."""
    from .logs import CHOSEN

    CHOSEN["format"], CHOSEN["part"] = value, str(ctx.info_name or "moonish")
    return value


def log_format(help: str | None = None) -> Callable[[F], F]:
    """``--log-format text|json``: how the command's log lines on stderr are written
    (``cli.logs.StderrLog``); the default is ``$MOONISH_LOG_FORMAT`` (how ``moonish run``
    asks its parts), else ``text``. ``help`` replaces the common help text."""
    return click.option(
        "--log-format",
        type=click.Choice(LOG_FORMATS),
        callback=_remember_log_format,
        envvar=FORMAT_VARIABLE,
        show_envvar=True,
        default="text",
        show_default=True,
        help=help
        or "Log lines on stderr: text (one timestamped line per event) or json (one JSON "
        "object per line: ts, level, part, event, message, and shard, lsn... where they "
        "apply). Data and summaries on stdout are the same either way.",
    )


# Operators' tools and the rest.


def dry_run(help: str) -> Callable[[F], F]:
    """``--dry-run``: only print what would be done."""
    return click.option("--dry-run", is_flag=True, help=help)


def as_json(help: str) -> Callable[[F], F]:
    """``--json``: print JSON instead of a table (passed as ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def spark_master(command: F) -> F:
    """``--master URL``: the Spark master."""
    option = click.option(
        "--master", default="local[*]", show_default=True, help="Spark master URL."
    )
    return option(command)


def storage_option(command: F) -> F:
    """``--storage-option KEY=VALUE`` (repeatable): delta-rs's storage options of an s3://
    table, passed as ``storage_options`` (a tuple of texts; moonish.spark.storage)."""
    option = click.option(
        "--storage-option",
        "storage_option",
        multiple=True,
        metavar="KEY=VALUE",
        help="For an s3:// table: an object store setting (AWS_REGION, AWS_ENDPOINT_URL, "
        "AWS_ALLOW_HTTP, ...), over the AWS environment variables; repeatable "
        "(docs/spark.md, Object storage).",
    )
    return option(command)


# The metrics endpoint: wal capture, cdc kafka, serve, spark materialize (cli/metrics.py).


def metrics_endpoint(command: F) -> F:
    """``--metrics-port`` and ``--metrics-host``: serve ``/metrics``, ``/healthz`` and
    ``/readyz`` (moonish.metrics.http)."""
    return stack(
        command,
        [
            click.option(
                "--metrics-port",
                type=click.IntRange(0, 65535),
                default=None,
                help="Serve /metrics (Prometheus text format), /healthz and /readyz on this "
                "port (0: any free one, logged); docs/operations.md lists the metrics.",
            ),
            click.option(
                "--metrics-host",
                default="127.0.0.1",
                show_default=True,
                help="The address --metrics-port listens on.",
            ),
        ],
    )


def ready_max_lag_ms(command: F) -> F:
    """``--ready-max-lag-ms``: /readyz's bound on seconds behind the source."""
    option = click.option(
        "--ready-max-lag-ms",
        type=click.IntRange(min=0),
        default=60_000,
        show_default=True,
        help="/readyz says unready while the capture is more than this far behind the "
        "master (moonish_source_behind_seconds), or its link is down.",
    )
    return option(command)
