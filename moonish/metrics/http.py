"""The metrics endpoint: one HTTP server on a thread of the process serving ``GET /metrics``
(the Prometheus text format, or OpenMetrics when the scraper asks: prometheus-client's own
exposition, ``make_wsgi_app``), ``GET /healthz`` (200 while the process answers: alive) and
``GET /readyz`` (200 ``ready``, or 503 with one line per reason: moonish.metrics.readiness).

**Decision: a small WSGI app of our own around prometheus-client's ``make_wsgi_app``, served
by the standard library's ``wsgiref`` on a daemon thread**, rather than ``start_http_server``
(which serves the metrics on every path and has no health checks) or the change-feed
server's aiohttp (the capture and the Kafka sink have no event loop, and ``moonish.metrics``
stays below every layer that could use it). One thread per request; a scrape costs what the
collectors read (moonish.cdc.metrics reads the data directory).

Under ``moonish run`` the parts run with ``PROMETHEUS_MULTIPROC_DIR`` (:data:`MULTIPROC_ENV`)
set to a directory the supervisor made; the supervisor serves :func:`parts_collector` of it and
calls :func:`forget_process` for each part that exits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app, multiprocess
from prometheus_client.registry import Collector

from moonish.errors import UnavailableError

from .readiness import Check, problems

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The environment variable that puts prometheus-client in multiprocess mode."""

DEFAULT_HOST = "127.0.0.1"


class Collectors:
    """Several collectors as one (what ``/metrics`` serves): their families in order."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self.collectors = list(collectors)

    def collect(self) -> Iterable[Any]:
        for collector in self.collectors:
            yield from collector.collect()


def process_collector(extra: Sequence[Collector] = ()) -> Collectors:
    """What a command's endpoint serves: this process's registry (prometheus-client's
    default: moonish's families, the process and Python figures) and ``extra``."""
    return Collectors([REGISTRY, *extra])


def parts_collector(multiproc_dir: str, extra: Sequence[Collector] = ()) -> Collectors:
    """What ``moonish run``'s endpoint serves: the values its parts wrote to
    ``multiproc_dir`` (prometheus-client's ``MultiProcessCollector``), then ``extra``."""
    registry = CollectorRegistry(auto_describe=True)
    multiprocess.MultiProcessCollector(registry, path=multiproc_dir)  # type: ignore[no-untyped-call]
    return Collectors([registry, *extra])


def forget_process(pid: int, multiproc_dir: str) -> None:
    """A part's process ``pid`` exited: its live gauges leave the sums (its counters stay)."""
    multiprocess.mark_process_dead(pid, multiproc_dir)  # type: ignore[no-untyped-call]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr: the commands' stderr is their log."""


def _app(collector: Collector, checks: Sequence[Check]) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app(collector)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        text = [("Content-Type", "text/plain; charset=utf-8")]
        if path == "/metrics":
            result: Iterable[bytes] = metrics(environ, start_response)
            return result
        if path == "/healthz":
            start_response("200 OK", text)
            return [b"ok\n"]
        if path == "/readyz":
            found = problems(checks)
            if found:
                start_response("503 Service Unavailable", text)
                return ["".join(f"not ready: {why}\n" for why in found).encode()]
            start_response("200 OK", text)
            return [b"ready\n"]
        start_response("404 Not Found", text)
        return [b"not found: GET /metrics, /healthz or /readyz\n"]

    return app


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host``:``port``, served from a daemon
    thread until :meth:`close`.

    Args:
        host: the address to listen on (``127.0.0.1``: this host only).
        port: the TCP port; 0: any free one (:attr:`port` says which).
        collector: what ``/metrics`` serves (:func:`process_collector`,
            :func:`parts_collector`).
        checks: ``/readyz``'s checks (moonish.metrics.readiness); none: ready while alive.

    Raises:
        UnavailableError: the address cannot be listened on (the port is taken, the host is
            not this machine's).
    """

    def __init__(
        self, host: str, port: int, collector: Collector, checks: Sequence[Check] = ()
    ) -> None:
        try:
            self._server = make_server(
                host, port, _app(collector, checks), server_class=_Server, handler_class=_Quiet
            )
        except OSError as exc:
            raise UnavailableError(
                f"cannot listen on {host}:{port} for metrics: {exc.strerror or exc}"
            ) from exc
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="moonish-metrics", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        """Stop serving and close the socket (waits for the serving thread)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
