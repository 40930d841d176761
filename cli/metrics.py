"""The metrics endpoint of a long-running command (``--metrics-port``): this process's
metrics and its data directory's (moonish.cdc.metrics), with ``/healthz`` and ``/readyz``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def endpoint(
    port: int | None,
    host: str,
    data_dir: str,
    announce: Callable[[str], None],
    *,
    source: bool = False,
    max_lag_ms: int | None = None,
) -> Iterator[None]:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host``:``port`` while the block
    runs (nothing when ``port`` is ``None``); ``announce`` gets the URL once listening.

    Args:
        data_dir: the data directory whose WAL and consumers are reported.
        source: the command is a live capture: ``/readyz`` needs its link up and at most
            ``max_lag_ms`` behind the master.

    Raises:
        UnavailableError: the port cannot be listened on.
    """
    if port is None:
        yield
        return
    from moonish.cdc.metrics import DataDirCollector
    from moonish.metrics.http import MetricsServer, process_collector
    from moonish.metrics.readiness import source_check

    collector = DataDirCollector(data_dir)
    served = process_collector([collector])
    lag_s = None if max_lag_ms is None else max_lag_ms / 1000
    checks = [source_check(process_collector(), lag_s, expected=True)] if source else []
    try:
        with MetricsServer(host, port, served, checks) as server:
            announce(server.url)
            yield
    finally:
        collector.close()
