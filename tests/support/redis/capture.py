"""A live capture in a thread against a real redis-server, and the keyspaces and envelopes to
compare after it."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import redis

import moonish
from moonish.cdc import shard_read
from moonish.redis.capture.runner import capture
from moonish.redis.capture.status import CaptureEvent, CaptureOptions, CaptureReport
from tests.support import live
from tests.support.redis.aof import workload
from tests.support.servers.redis_server import comparable, redis_entry, shard_writer

FAST = CaptureOptions(
    sync_interval_ms=20, batch_wait_ms=20, status_interval_ms=100, mark_interval_ms=200
)


def url_of(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}"


def client_of(client: redis.Redis, db: int = 0) -> redis.Redis:
    """A client of ``client``'s server (TLS and all) on database ``db``, bytes replies; it owns
    its pool (``close()`` closes its connections)."""
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, "db": db, "decode_responses": False}
    return redis.Redis.from_pool(redis.ConnectionPool(pool.connection_class, **kwargs))


def master_offset(client: redis.Redis) -> int:
    return int(client.info("replication")["master_repl_offset"])


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Running:
    """A capture in a thread, stopped on exit; ``report`` is the progress seen last."""

    def __init__(
        self,
        client: redis.Redis,
        data_dir: Path,
        shards: int,
        processes: int = 1,
        options: CaptureOptions = FAST,
        progress: Callable[[CaptureReport], None] | None = None,
    ) -> None:
        self.stop = threading.Event()
        self.result: list[Any] = []
        self.report: CaptureReport | None = None
        self.events: list[CaptureEvent] = []  # what on_event was given, in order
        self._progress = progress

        def run() -> None:
            try:
                self.result.append(
                    capture(
                        url_of(client),
                        data_dir,
                        shards,
                        stop=self.stop,
                        progress=self._seen,
                        options=options,
                        processes=processes,
                        on_event=self.events.append,
                    )
                )
            except BaseException as exc:  # reported by finish()
                self.result.append(exc)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        live.started(self.thread, self.stop)

    def _seen(self, report: CaptureReport) -> None:
        self.report = report
        if self._progress is not None:
            self._progress(report)

    def durable(self) -> int:
        return -1 if self.report is None else self.report.durable_offset

    def caught_up(self, client: redis.Redis) -> None:
        """Wait until every change Redis holds is durable in the capture."""
        wait_for(lambda: self.result or self.durable() >= master_offset(client), "the capture")
        assert not self.result, self.result

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        live.stopped(self.thread)

    def finish(self) -> CaptureReport:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        live.stopped(self.thread)
        (outcome,) = self.result
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, CaptureReport)
        return outcome


class Following:
    """A capture of ``url`` in a thread until :meth:`finish`: ``run`` is :func:`capture`
    (``shards`` 2 by default) or another function of its signature (``capture_cluster``);
    ``report`` is the progress seen last, ``events`` what ``on_event`` was given."""

    def __init__(
        self,
        url: str,
        data: Path,
        shards: int = 2,
        run: Callable[..., CaptureReport] = capture,
        options: CaptureOptions = FAST,
        **kwargs: Any,
    ) -> None:
        self.stop = threading.Event()
        self.events: list[CaptureEvent] = []
        self.report: CaptureReport | None = None
        self.result: list[Any] = []

        def go() -> None:
            try:
                self.result.append(
                    run(
                        url,
                        data,
                        shards,
                        stop=self.stop,
                        options=options,
                        progress=self._seen,
                        on_event=self.events.append,
                        **kwargs,
                    )
                )
            except BaseException as exc:
                self.result.append(exc)

        self.thread = threading.Thread(target=go, daemon=True)
        self.thread.start()
        live.started(self.thread, self.stop)

    def _seen(self, report: CaptureReport) -> None:
        self.report = report

    def until(self, condition: Callable[[CaptureReport], bool], what: str) -> None:
        """Wait (up to 60 s) until a progress report meets ``condition``; the capture must
        still run."""
        wait_for(
            lambda: bool(self.result or (self.report is not None and condition(self.report))),
            what,
            60,
        )
        assert not self.result, self.result

    def caught_up(self, client: redis.Redis) -> None:
        """Until the durable offset reaches the master's (a single master's capture)."""
        self.until(lambda report: report.durable_offset >= master_offset(client), "the capture")

    def finish(self) -> CaptureReport:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        live.stopped(self.thread)
        (outcome,) = self.result
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, CaptureReport)
        return outcome


def redis_state(client: redis.Redis, dbs: tuple[int, ...] = (0, 1)) -> dict[Any, Any]:
    state = {}
    for db in dbs:
        in_db = client_of(client, db)
        state.update({(db, key): comparable(redis_entry(in_db, key)) for key in in_db.scan_iter()})
        in_db.close()
    return state


def our_state(data_dir: Path) -> dict[Any, Any]:
    state = {}
    for shard_dir in moonish.shard_dirs(data_dir):
        with shard_writer(Path(shard_dir)) as writer:
            state.update({(db, key): comparable(e) for db, key, e in writer.keyspace.items()})
    return state


def events(data_dir: Path, after: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The envelopes of every shard (``after``: only those past each shard's LSN there)."""
    out = []
    for shard_dir in moonish.shard_dirs(data_dir):
        start = (after or {}).get(shard_dir, 0) + 1
        out += [orjson.loads(e.envelope) for e in shard_read.tail(shard_dir, from_lsn=start)]
    return out


def last_lsns(data_dir: Path) -> dict[str, int]:
    return {path: shard_read.info(path)["next_lsn"] - 1 for path in moonish.shard_dirs(data_dir)}


def every_type(
    client: redis.Redis, rng: random.Random, count: int, tag: str, *, live: bool
) -> None:
    """:func:`workload` plus another db, expiring keys, a Lua script's effects, a trimmed
    stream and a blocking pop."""
    workload(client, rng, count)
    other = client_of(client, 1)
    other.set("in-db-1", "x", px=60_000)
    other.hset("h1", mapping={"a": 1, "b": 2})
    other.expire("h1", 1000)
    client.eval("redis.call('set', KEYS[1], 'lua'); redis.call('incr', KEYS[2])", 2, "{s}a", "{s}b")
    client.xadd(f"{{g}}stream{tag}", {"f": "v"}, maxlen=5)  # stream groups: not in this build
    if live:
        client.blpop(["{k3}:l"], timeout=0.01)  # propagated as LPOP
    client.set("short-lived", "v", px=50)
    time.sleep(0.2)
    client.get("short-lived")  # expired: Redis propagates DEL
    client.publish("channel", "not a change")
    other.close()
