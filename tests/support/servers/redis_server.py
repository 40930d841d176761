"""A real redis-server (installed by `make install` from the Debian package) on 127.0.0.1,
started and stopped by the tests, and the oracle that reads a key back from it. Redis 7.4
(hash-field TTLs; `make install` puts it in .venv/redis-7.4): :func:`redis74_binary`."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from moonish.clock import SYSTEM_CLOCK
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import HASH, LIST, SET, STREAM, STRING, ZSET, Entry, Stream
from tests.support.paths import ROOT


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


REDIS74 = ROOT / ".venv" / "redis-7.4"


def redis74_binary() -> str:
    """The Redis 7.4 redis-server `make install` puts in ``.venv/redis-7.4`` (its OpenSSL
    1.1 libraries beside it, in ``lib``)."""
    binary = REDIS74 / "bin" / "redis-server"
    assert binary.exists(), f"{binary} is missing: `make install` installs Redis 7.4 there"
    return str(binary)


@contextlib.contextmanager
def redis_server(workdir: Path, *extra: str, binary: str | None = None) -> Iterator[redis.Redis]:
    """A redis-server in ``workdir`` on a free port; yields a client (bytes replies).
    ``binary``: another redis-server than the installed one (:func:`redis74_binary`)."""
    env = dict(os.environ)
    libs = None if binary is None else Path(binary).parent.parent / "lib"
    if libs is not None and libs.is_dir():  # .venv/redis-7.4/bin/redis-server needs its lib
        env["LD_LIBRARY_PATH"] = str(libs)
    binary = binary or shutil.which("redis-server")
    assert binary, "redis-server is missing: `make install` installs it (Debian package)"
    port = _free_port()
    args = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(workdir),
        "--save",
        "",
        "--daemonize",
        "no",
        *extra,
    ]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env)
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


def rewrite_aof(client: redis.Redis) -> None:
    """BGREWRITEAOF, and wait (up to 30 s) until Redis has finished it."""
    client.bgrewriteaof()
    deadline = time.monotonic() + 30
    while True:
        info = client.info("persistence")
        if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
            return
        assert time.monotonic() < deadline, "BGREWRITEAOF did not finish"
        time.sleep(0.02)


def shard_writer(path: Path) -> ShardWriter:
    """A ShardWriter to compare with Redis: the system clock, no fsync, no sweep thread."""
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    return ShardWriter(path, options, SYSTEM_CLOCK)


def redis_entry(client: redis.Redis, key: bytes) -> Entry | None:
    """The key as Redis holds it, in moonish's internal form (None: no such key)."""
    return redis_entries(client, [key])[0]


def redis_entries(client: redis.Redis, keys: list[bytes]) -> list[Entry | None]:
    """:func:`redis_entry` of several keys in two round trips (pipelines): TYPE, then GET /
    HGETALL / LRANGE / SMEMBERS / ZRANGE WITHSCORES / XRANGE and PEXPIRETIME."""
    types = client.pipeline(transaction=False)
    for key in keys:
        types.type(key)
    kinds = [kind.decode() for kind in types.execute()]
    reads = client.pipeline(transaction=False)
    for key, kind in zip(keys, kinds, strict=True):
        if kind == "none":
            continue
        read = {
            STRING: reads.get,
            HASH: reads.hgetall,
            SET: reads.smembers,
            STREAM: reads.xrange,
        }.get(kind)
        if read is not None:
            read(key)
        elif kind == LIST:
            reads.lrange(key, 0, -1)
        elif kind == ZSET:
            reads.zrange(key, 0, -1, withscores=True)
        else:
            raise AssertionError(f"unexpected type {kind}")
        reads.pexpiretime(key)
    replies = iter(reads.execute())
    entries: list[Entry | None] = []
    for kind in kinds:
        if kind == "none":
            entries.append(None)
            continue
        value: Any = next(replies)
        expire = next(replies)
        if kind == ZSET:
            value = dict(value)
        elif kind == STREAM:
            value = list(value)
        entries.append(Entry(kind, value, None if expire < 0 else expire))
    return entries


_LENGTH = {
    STRING: "STRLEN",
    HASH: "HLEN",
    LIST: "LLEN",
    SET: "SCARD",
    ZSET: "ZCARD",
    STREAM: "XLEN",
}


def redis_shapes(client: redis.Redis, keys: list[bytes]) -> list[Any]:
    """(type, length, expire_at_ms) of each key, or None: what :func:`shape` gives for
    moonish's entries, in two round trips."""
    types = client.pipeline(transaction=False)
    for key in keys:
        types.type(key)
    kinds = [kind.decode() for kind in types.execute()]
    reads = client.pipeline(transaction=False)
    for key, kind in zip(keys, kinds, strict=True):
        if kind != "none":
            reads.execute_command(_LENGTH[kind], key)
            reads.pexpiretime(key)
    replies = iter(reads.execute())
    shapes = []
    for kind in kinds:
        if kind == "none":
            shapes.append(None)
        else:
            size, expire = next(replies), next(replies)
            shapes.append((kind, size, None if expire < 0 else expire))
    return shapes


def shape(entry: Entry | None) -> Any:
    if entry is None:
        return None
    value = entry.value  # a Redis stream reply is a list of entries; moonish's a Stream
    size = (
        len(value.entries) if entry.type == STREAM and not isinstance(value, list) else len(value)
    )
    return (entry.type, size, entry.expire_at_ms)


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
    elif entry.type == LIST:
        value = list(value)
    return (entry.type, value, entry.expire_at_ms)


# -- streams with consumer groups -----------------------------------------------------------

StreamState = tuple[Any, ...]
"""A stream as plain values: (entries [(id, fields)], last ID, max deleted ID, entries added,
groups [(name, last delivered ID, entries read or None, pending [(id, consumer, delivery ms,
delivery count)], consumers [(name, seen ms)])]); IDs as ``b"<ms>-<seq>"``, in Redis's
orders (IDs, name bytes)."""


def raw_client(client: redis.Redis) -> redis.Redis:
    """A second connection to ``client``'s server whose replies are not reshaped by redis-py
    (XCLAIM, XAUTOCLAIM and XINFO replies as Redis sends them)."""
    kwargs = client.connection_pool.connection_kwargs
    raw = redis.Redis(host=kwargs["host"], port=kwargs["port"])
    raw.response_callbacks.clear()
    return raw


def _pairs(flat: list[Any] | dict[bytes, Any]) -> dict[bytes, Any]:
    """A RESP3 map as it comes, or a RESP2 flat list of keys and values as a dict."""
    if isinstance(flat, dict):
        return flat
    return dict(zip(flat[::2], flat[1::2], strict=True))


def redis_stream(raw: redis.Redis, key: bytes) -> StreamState | None:
    """The stream at ``key`` as Redis holds it (``XINFO STREAM key FULL COUNT 0``, on a
    :func:`raw_client`), or None when there is no such key."""
    if raw.execute_command("TYPE", key) != b"stream":
        return None
    info = _pairs(raw.execute_command("XINFO", "STREAM", key, "FULL", "COUNT", "0"))
    groups = []
    for flat in info[b"groups"]:
        group = _pairs(flat)
        pending = [(i, c, int(t), int(n)) for i, c, t, n in group[b"pending"]]
        consumers = [(c[b"name"], int(c[b"seen-time"])) for c in map(_pairs, group[b"consumers"])]
        read = group[b"entries-read"]
        groups.append(
            (
                group[b"name"],
                group[b"last-delivered-id"],
                None if read is None else int(read),
                pending,
                consumers,
            )
        )
    entries = [(i, list(fields)) for i, fields in info[b"entries"]]
    return (
        entries,
        info[b"last-generated-id"],
        info[b"max-deleted-entry-id"],
        int(info[b"entries-added"]),
        groups,
    )


def stream_state(stream: Stream | None) -> StreamState | None:
    """moonish's stream in the form of :func:`redis_stream`."""
    if stream is None:
        return None
    ident = b"%d-%d".__mod__
    groups = []
    for name, group in sorted(stream.groups.items()):
        pending = [
            (ident(i), p.consumer, p.delivery_time_ms, p.delivery_count)
            for i, p in sorted(group.pending.items())
        ]
        groups.append(
            (
                name,
                ident(group.last_id),
                None if group.entries_read == -1 else group.entries_read,
                pending,
                sorted(group.consumers.items()),
            )
        )
    entries = [(ident(i), fields) for i, fields in stream.entries.items()]
    return (
        entries,
        ident(stream.last_id),
        ident(stream.max_deleted_id),
        stream.entries_added,
        groups,
    )


def split_times(state: StreamState | None) -> tuple[Any, list[int], list[int]]:
    """(``state`` with every time replaced by 0, its delivery times, its seen times), so a
    comparison can take times with a tolerance or a window: Redis and moonish each read
    their own clock."""
    if state is None:
        return None, [], []
    entries, last, deleted, added, groups = state
    bare, delivered, seen = [], [], []
    for name, last_delivered, read, pending, consumers in groups:
        delivered += [t for _, _, t, _ in pending]
        seen += [t for _, t in consumers]
        bare.append(
            (
                name,
                last_delivered,
                read,
                [(i, c, 0, n) for i, c, _, n in pending],
                [(c, 0) for c, _ in consumers],
            )
        )
    return (entries, last, deleted, added, bare), delivered, seen
