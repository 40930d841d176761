"""``moonish serve``: the change stream of a data directory over HTTP and WebSocket."""

from __future__ import annotations

import logging
import sys

import click
import orjson

from moonish.errors import MoonishError
from moonish.serve import Limits, ServeOptions, Server, load_token, run
from moonish.serve.options import DEFAULT_HOST, DEFAULT_LINGER_MS, DEFAULT_PORT

from . import options
from .errors import EXIT_CODES, LoggedExit
from .logs import LogHandler, StderrLog
from .metrics import endpoint
from .params import KEY_PATTERN

_DEFAULTS = Limits()
_LOGGERS = ("moonish.serve", "aiohttp")  # their records are the errors of a running server


@click.command("serve")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="TCP port (0: any free port; the first stdout line says which).",
)
@options.token_file(
    help="A file holding the bearer token every request must carry (needed for any host but "
    "a loopback address)."
)
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="PEM certificate.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="PEM private key.")
@click.option(
    "--max-subscribers",
    type=click.IntRange(1),
    default=_DEFAULTS.max_subscribers,
    show_default=True,
    help="Open feeds at once (one more gets 429).",
)
@click.option(
    "--max-request-bytes",
    type=click.IntRange(1),
    default=_DEFAULTS.max_request_bytes,
    show_default=True,
    help="Largest request body or WebSocket message (413 / close 1009).",
)
@click.option(
    "--idle-timeout-ms",
    type=click.IntRange(1),
    default=_DEFAULTS.idle_timeout_ms,
    show_default=True,
    help="Close idle kept-alive connections and unanswered WebSockets.",
)
@click.option(
    "--ring-bytes",
    type=click.IntRange(1),
    default=_DEFAULTS.ring_bytes,
    show_default=True,
    help="Memory for the shared ring of recent changes.",
)
@click.option(
    "--linger-ms",
    type=click.FloatRange(0, 1000),
    default=DEFAULT_LINGER_MS,
    show_default=True,
    help="While changes keep coming, read the log at most this often: fewer, fuller writes "
    "to each subscriber. The first change after a quiet spell goes out at once.",
)
@options.messages(help='Also serve checkpoints and message records (op "m") in every feed.')
@click.option(
    "--include-keys",
    multiple=True,
    type=KEY_PATTERN,
    metavar="PATTERN",
    help="Serve only the changes of keys matching one of these Redis glob patterns "
    "(repeatable), in every feed; the others are passed over (the token still moves). A "
    "request's include_keys narrow it further.",
)
@click.option(
    "--exclude-keys",
    multiple=True,
    type=KEY_PATTERN,
    metavar="PATTERN",
    help="Pass over the changes of keys matching any of these patterns (repeatable), in "
    "every feed.",
)
@options.log_format(
    help="Log lines on stderr: text (as Python logs them: only errors) or json (one JSON "
    "object per line, ts, level, part, event, message: listening with url and data_dir, "
    "stopped, and each error). The first stdout line is the same either way."
)
@options.metrics_endpoint
def serve(
    data_dir: str,
    host: str,
    port: int,
    token_file: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    max_subscribers: int,
    max_request_bytes: int,
    idle_timeout_ms: int,
    ring_bytes: int,
    linger_ms: float,
    messages: bool,
    include_keys: tuple[str, ...],
    exclude_keys: tuple[str, ...],
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Serve DATA_DIR's changes: CouchDB-style feeds at /v1/changes, WebSocket push with
    credit at /v1/ws, consumers at /v1/consumers, facts at /v1/info (docs/server.md).

    Listens on 127.0.0.1 unless --host says otherwise, which needs --token-file. Prints
    {"url": ..., "data_dir": ...} on stdout once listening; SIGINT or SIGTERM stops it
    (exit 0). With --log-format json, stderr has a JSON line when it listens, when it has
    stopped, and for each error (one that ends it too, before its exit status).

    Example:

        moonish serve data --port 8470

        curl -N 'http://127.0.0.1:8470/v1/changes?feed=continuous&since=now&heartbeat=5000'

        moonish serve data --exclude-keys 'session:*' --exclude-keys 'tmp:*'
    """
    limits = Limits(
        max_subscribers=max_subscribers,
        max_request_bytes=max_request_bytes,
        idle_timeout_ms=idle_timeout_ms,
        ring_bytes=ring_bytes,
    )
    token = None if token_file is None else load_token(token_file)
    options = ServeOptions(
        host=host,
        port=port,
        token=token,
        tls_cert=tls_cert,
        tls_key=tls_key,
        limits=limits,
        linger_ms=linger_ms,
        messages=messages,
        include_keys=include_keys,
        exclude_keys=exclude_keys,
    )

    log = StderrLog("serve", log_format=log_format)

    def ready(server: Server) -> None:
        line = orjson.dumps({"url": server.url, "data_dir": data_dir})
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.flush()
        if log.json:
            where = {"url": server.url, "data_dir": data_dir}
            log.line("listening", f"listening on {server.url}, serving {data_dir}", where)

    def announce(url: str) -> None:
        log.line("metrics", f"metrics on {url}/metrics", {"url": url})

    with endpoint(metrics_port, metrics_host, data_dir, announce):
        if not log.json:
            run(data_dir, options, on_ready=ready)
            return
        handler = LogHandler(log, "error")
        for name in _LOGGERS:
            logging.getLogger(name).addHandler(handler)
        try:
            run(data_dir, options, on_ready=ready)
        except (MoonishError, OSError) as error:
            kind = error.kind if isinstance(error, MoonishError) else "error"
            exit_code = EXIT_CODES.get(kind, 1)
            fields = {"kind": kind, "exit_code": exit_code}
            log.line("exit", f"{kind}: {error}", fields, level="error")
            raise LoggedExit(exit_code) from error
        finally:
            for name in _LOGGERS:
                logging.getLogger(name).removeHandler(handler)
        log.line("stopped", "stopped: exit 0", {"exit_code": 0})
