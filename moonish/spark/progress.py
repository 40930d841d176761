"""Running a streaming query from a command: a progress line per micro-batch, and a clean stop.

Stopping. PySpark's ``SparkContext`` replaces the SIGINT handler with one that cancels every
job and raises ``KeyboardInterrupt`` wherever the main thread is, often inside a py4j call,
which prints dozens of lines of tracebacks; and a ``StreamingQuery.stop()`` in the middle of
a micro-batch cancels its jobs, whose Python workers then print tracebacks of their own.
So:

- :func:`stop_on_signals` installs SIGINT and SIGTERM handlers that only count a
  :class:`StopRequest`;
- :func:`run_until_stopped` then closes the query's :class:`BatchGate`: it waits for the
  running micro-batch to commit (a second signal: not any longer) and no micro-batch starts
  after it (one that tries fails as :class:`BatchStopped`, uncommitted: the next run does it);
- and only then calls ``query.stop()``, with Spark's log off.

Progress comes from ``StreamingQuery.recentProgress`` (Spark's ``StreamingQueryProgress``,
one per executed micro-batch; the last 100 are kept, so polling every ``poll_ms`` misses none
unless a hundred micro-batches run within one poll). Example line::

    batch 7: 40000 rows in 1834 ms; shard 0: LSN 120001..130000, shard 1: LSN 98001..108000
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import Any

import orjson

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def progress_line(progress: Mapping[str, Any]) -> str:
    """One line for one micro-batch's ``StreamingQueryProgress`` (a dict): batch id, input
    rows, duration in ms, and what each source read: per shard the inclusive LSN range for
    the ``moonish`` source (offsets ``{"<shard>": <next LSN>}``, or a server's
    ``{"token": "<token>"}``), else the raw offsets
    (``{"logOffset": n}`` for the file source of ``cdc export`` files)."""
    parts = [
        f"batch {progress.get('batchId')}: {progress.get('numInputRows') or 0} rows in "
        f"{progress.get('batchDuration')} ms"
    ]
    for source in progress.get("sources") or ():
        parts.append(_offsets(source.get("startOffset"), source.get("endOffset")))
    return "; ".join(parts)


def progress_fields(progress: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`progress_line` says, as values: ``batch_id``, ``rows``, ``duration_ms``,
    and ``lsn_ranges`` (``{"<shard>": [first, last]}``, inclusive, the shards that read any)
    for the ``moonish`` source, else ``offsets`` (``[{"start": ..., "end": ...}]``, one per
    source, as Spark gives them)."""
    fields: dict[str, Any] = {
        "batch_id": progress.get("batchId"),
        "rows": progress.get("numInputRows") or 0,
        "duration_ms": progress.get("batchDuration"),
    }
    for source in progress.get("sources") or ():
        start, end = _json(source.get("startOffset")), _json(source.get("endOffset"))
        start, end = _next_lsns(start), _next_lsns(end)
        if isinstance(end, dict) and end and all(key.isdigit() for key in end):
            start = start if isinstance(start, dict) else {}
            ranges = fields.setdefault("lsn_ranges", {})
            for shard, lsn in sorted(end.items(), key=lambda item: int(item[0])):
                if isinstance(lsn, int) and lsn > start.get(shard, 1):
                    ranges[shard] = [start.get(shard, 1), lsn - 1]
        else:
            fields.setdefault("offsets", []).append({"start": start, "end": end})
    return fields


def _offsets(start_text: Any, end_text: Any) -> str:
    start, end = _next_lsns(_json(start_text)), _next_lsns(_json(end_text))
    if isinstance(end, dict) and end and all(key.isdigit() for key in end):
        start = start if isinstance(start, dict) else {}
        ranges = [
            f"shard {shard}: LSN {start.get(shard, 1)}..{lsn - 1}"
            for shard, lsn in sorted(end.items(), key=lambda item: int(item[0]))
            if isinstance(lsn, int) and lsn > start.get(shard, 1)
        ]
        return ", ".join(ranges) or "no new LSN"
    return f"offsets {start_text} -> {end_text}"


def _next_lsns(offsets: Any) -> Any:
    """A URL source's offset, ``{"token": "<token>"}`` (last LSN delivered per shard), as
    the directory source's, ``{"<shard>": <next LSN>}``; any other value as it is."""
    from moonish.cdc.token import Token
    from moonish.errors import InvalidArgumentError

    if not (isinstance(offsets, dict) and set(offsets) == {"token"}):
        return offsets
    try:
        token = Token.parse(str(offsets["token"]))
    except InvalidArgumentError:
        return offsets
    return {str(shard): lsn + 1 for shard, lsn in enumerate(token.positions)}


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


class BatchStopped(Exception):
    """A micro-batch refused or cut short by a stop; it is not committed, the next run applies
    it. Its message is short on purpose: Spark matches the message of an error from a
    ``foreachBatch`` function (with the Python traceback in it) against a regular expression
    that recurses once per character, and a long one overflows the JVM's stack."""


class BatchGate:
    """Lets a stop wait for the running micro-batch instead of cancelling its jobs. The sink
    runs each micro-batch inside :meth:`batch`; :meth:`close` waits for it. Thread-safe."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._running = threading.Lock()

    @contextmanager
    def batch(self, batch_id: int) -> Iterator[None]:
        """Around one micro-batch's work (in the ``foreachBatch`` function).

        Raises:
            BatchStopped: :meth:`close` was called before it started, or while it ran and
                its work failed (its jobs were cancelled by a forced stop).
        """
        if not self._running.acquire(blocking=False):  # close() holds it: stopping
            raise BatchStopped(f"micro-batch {batch_id} not started: stopping")
        try:
            if self._stopping.is_set():
                raise BatchStopped(f"micro-batch {batch_id} not started: stopping")
            try:
                yield
            except Exception:
                if self._stopping.is_set():
                    raise BatchStopped(f"micro-batch {batch_id} cut short: stopped") from None
                raise
        finally:
            self._running.release()

    def close(self, timeout_s: float) -> bool:
        """Let no micro-batch start from now on, and wait up to ``timeout_s`` seconds for the
        running one; returns whether none runs any more (call again to keep waiting)."""
        self._stopping.set()
        return self._running.acquire(timeout=timeout_s)


class StopRequest:
    """Stop requests counted by the handlers of :func:`stop_on_signals`: the first asks for
    a stop after the running micro-batch, a later one for a stop at once."""

    def __init__(self) -> None:
        self.count = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()


@contextmanager
def stop_on_signals(request: StopRequest) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM only call ``request``; the previous handlers come
    back after it. Enter it after the SparkSession exists (PySpark installs its own SIGINT
    handler when it starts), from the main thread."""

    def handler(signum: int, frame: FrameType | None) -> None:
        request()

    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def run_until_stopped(
    spark: Any,
    query: Any,
    gate: BatchGate,
    request: StopRequest,
    report: Callable[[str, Mapping[str, Any] | None], None],
    poll_ms: int = 200,
    on_batch: Callable[[Mapping[str, Any]], None] | None = None,
) -> bool:
    """Wait for a started streaming query, calling ``report`` with :func:`progress_line` of
    each micro-batch as it completes, until the query ends or ``request`` is made; then stop
    it as the module docstring says (also reporting that it waits for a micro-batch).

    Args:
        spark: the query's ``SparkSession``.
        query: a started ``pyspark.sql.streaming.StreamingQuery`` whose micro-batches run
            inside ``gate.batch`` (:func:`moonish.spark.table.materialize` with ``gate``).
        gate: the query's gate.
        request: the stop request the signal handlers make.
        report: called with one line per micro-batch (without a newline), in batch order,
            and its progress (a dict); and with a line and ``None`` when a stop waits for
            the running micro-batch.
        poll_ms: how often progress and ``request`` are checked.
        on_batch: also called with each micro-batch's progress (Spark's
            ``StreamingQueryProgress`` as a dict), once the batch is committed.

    Returns:
        whether a stop request ended it (False: the query ended by itself, as a query with
        ``availableNow`` does).

    Raises:
        StreamingQueryException: the query failed before a stop was requested.
    """
    last = -1

    def report_new() -> None:
        nonlocal last
        for progress in query.recentProgress:
            if progress.get("batchId", -1) > last:
                last = progress["batchId"]
                report(progress_line(progress), progress)
                if on_batch is not None:
                    on_batch(progress)

    try:
        while not request.event.is_set():
            finished = query.awaitTermination(poll_ms / 1000)
            report_new()
            if finished:
                return False
    except Exception:
        if not request.event.is_set():
            raise
    first = request.count
    if not gate.close(poll_ms / 1000):
        report("stopping after the running micro-batch (again to stop at once)", None)
        while request.count == first and not gate.close(poll_ms / 1000):
            report_new()
    spark.sparkContext.setLogLevel("OFF")  # a micro-batch cut short logs its cancellation
    query.stop()
    report_new()
    return True
