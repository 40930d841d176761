"""A real redis-server (installed by `make install` from the Debian package) on 127.0.0.1,
started and stopped by the tests, and the oracle that reads a key back from it."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from moonish.state.values import HASH, LIST, SET, STREAM, STRING, ZSET, Entry


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def redis_server(workdir: Path, *extra: str) -> Iterator[redis.Redis]:
    """A redis-server in ``workdir`` on a free port; yields a client (bytes replies)."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is missing: `make install` installs it (Debian package)"
    port = _free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
            "--save", "", "--daemonize", "no", *extra]  # fmt: skip
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                while client.info("persistence").get("loading"):
                    time.sleep(0.05)
                break
            except (redis.ConnectionError, redis.BusyLoadingError):
                assert process.poll() is None, "redis-server exited"
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        yield client
    finally:
        client.close()
        process.terminate()
        process.wait(10)


def redis_entry(client: redis.Redis, key: bytes) -> Entry | None:
    """The key as Redis holds it, in moonish's internal form (None: no such key)."""
    kind = client.type(key).decode()
    value: Any
    if kind == "none":
        return None
    if kind == STRING:
        value = client.get(key)
    elif kind == HASH:
        value = client.hgetall(key)
    elif kind == LIST:
        value = client.lrange(key, 0, -1)
    elif kind == SET:
        value = client.smembers(key)
    elif kind == ZSET:
        value = dict(client.zrange(key, 0, -1, withscores=True))
    elif kind == STREAM:
        value = [(i, fields) for i, fields in client.xrange(key)]
    else:
        raise AssertionError(f"unexpected type {kind}")
    expire = client.pexpiretime(key)
    return Entry(kind, value, None if expire < 0 else expire)


def comparable(entry: Entry | None) -> Any:
    """An entry (moonish's or :func:`redis_entry`'s) as plain values that compare equal."""
    if entry is None:
        return None
    value = entry.value
    if entry.type == STREAM and not isinstance(value, list):
        value = [
            (b"%d-%d" % i, dict(zip(f[::2], f[1::2], strict=True)))
            for i, f in value.entries.items()
        ]
    elif entry.type == STREAM:
        value = [(i, dict(fields)) for i, fields in value]
    elif entry.type == HASH:
        value = dict(value)
    elif entry.type == SET:
        value = set(value)
    elif entry.type == ZSET:
        value = {m: float(s) for m, s in value.items()}
    return (entry.type, value, entry.expire_at_ms)
