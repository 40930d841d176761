"""A large Redis 7 AOF written by a real redis-server, for the import benchmark (bench.importer).

The workload follows the mix of the real fixture (``fixtures/redis-aof/mixed``): per 100
commands about 10 SET, 10 HSET, 9 each of LPUSH, RPUSH, LPOP, RPOP, INCR, ZADD and MSET (10
pairs), 5 each of ZPOPMIN, SADD and SREM, and a tail of XADD, SET with EX (propagated as ``SET
... PXAT``), PEXPIREAT, INCRBY, HINCRBY, HDEL, DEL, RENAME, APPEND and MULTI/EXEC blocks; about
1% of the keys are binary or non-ASCII. Values are 4-40 bytes. The commands are sent to a
redis-server started with ``appendonly yes`` and ``aof-use-rdb-preamble no`` (so its AOF is
all commands), ``appendfsync no``, pipelined in chunks of 5,000; what Redis propagates (a pop
of an empty list propagates nothing, EX becomes PXAT) is what the AOF holds.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import hiredis

from moonish.redis.replication.resp import encode_command

CHUNK = 5_000


def _keys(rng: random.Random, kind: str, count: int) -> list[bytes]:
    keys = [b"%s:%06d" % (kind.encode(), i) for i in range(count)]
    for i in rng.sample(range(count), max(1, count // 100)):  # 1%: binary or non-ASCII
        keys[i] = keys[i] + (b"\xff\xfe" if i % 2 else "-ключ".encode())
    return keys


def _value(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(2, 20)).hex().encode()


def workload(commands: int, seed: int = 11) -> list[list[bytes]]:
    """``commands`` client commands (MULTI/EXEC blocks count as their commands)."""
    rng = random.Random(seed)
    strings, hashes, lists = (
        _keys(rng, "str", 50_000),
        _keys(rng, "hash", 5_000),
        _keys(rng, "list", 2_000),
    )
    counters, zsets, sets = (
        _keys(rng, "ctr", 10_000),
        _keys(rng, "zset", 2_000),
        _keys(rng, "set", 2_000),
    )
    streams = _keys(rng, "stream", 50)
    pick = rng.choice
    out: list[list[bytes]] = []

    def one() -> list[bytes]:
        roll = rng.random() * 100
        if roll < 10:
            return [b"SET", pick(strings), _value(rng)]
        if roll < 20:
            return [b"HSET", pick(hashes), b"f%d" % rng.randrange(20), _value(rng)]
        if roll < 29:
            return [b"LPUSH", pick(lists), _value(rng)]
        if roll < 38:
            return [b"RPUSH", pick(lists), _value(rng)]
        if roll < 46:
            return [b"LPOP", pick(lists)]
        if roll < 54:
            return [b"RPOP", pick(lists)]
        if roll < 63:
            return [b"INCR", pick(counters)]
        if roll < 72:
            return [b"ZADD", pick(zsets), b"%d" % rng.randrange(1000), b"m%d" % rng.randrange(300)]
        if roll < 81:
            pairs = [x for _ in range(10) for x in (pick(strings), _value(rng))]
            return [b"MSET", *pairs]
        if roll < 86:
            return [b"ZPOPMIN", pick(zsets)]
        if roll < 91:
            return [b"SADD", pick(sets), b"m%d" % rng.randrange(100)]
        if roll < 96:
            return [b"SREM", pick(sets), b"m%d" % rng.randrange(100)]
        if roll < 97:
            return [b"XADD", pick(streams), b"*", b"field", _value(rng), b"n", b"%d" % len(out)]
        if roll < 97.5:
            return [b"SET", pick(strings), _value(rng), b"EX", b"%d" % rng.randrange(3600, 86400)]
        if roll < 98:
            return [b"EXPIRE", pick(counters), b"%d" % rng.randrange(3600, 86400)]
        if roll < 98.4:
            return [b"INCRBY", pick(counters), b"%d" % rng.randrange(-50, 50)]
        if roll < 98.8:
            return [b"HINCRBY", pick(hashes), b"n", b"%d" % rng.randrange(100)]
        if roll < 99.1:
            return [b"HDEL", pick(hashes), b"f%d" % rng.randrange(20)]
        if roll < 99.4:
            return [b"DEL", pick(strings), pick(strings)]
        if roll < 99.6:
            return [b"RENAME", pick(strings), pick(strings)]
        return [b"APPEND", pick(strings), _value(rng)]

    while len(out) < commands:
        if rng.random() < 0.002:  # a MULTI/EXEC block of 3 commands
            out += [[b"MULTI"], one(), one(), one(), [b"EXEC"]]
        else:
            out.append(one())
    return out


def _send(port: int, commands: list[list[bytes]]) -> None:
    """Send ``commands`` pipelined in chunks, reading every reply (errors included: RENAME
    of a missing key is refused, as a client would see)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        reader = hiredis.Reader()
        for first in range(0, len(commands), CHUNK):
            chunk = commands[first : first + CHUNK]
            sock.sendall(b"".join(encode_command(*argv) for argv in chunk))
            replies = 0
            while replies < len(chunk):
                item = reader.gets()
                if item is False:
                    reader.feed(sock.recv(1 << 20))
                else:
                    replies += 1


def redis_args(workdir: Path, port: int, *extra: str) -> list[str]:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is missing: `make install` installs it (Debian package)"
    return [
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
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        "no",
        "--appendfsync",
        "no",
        *extra,
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ping(port: int, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Until redis-server answers PING with PONG (it answers -LOADING while it loads)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, "redis-server exited"
        assert time.monotonic() < deadline, "redis-server did not start"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                if sock.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.002)


def build_aof(workdir: Path, commands: int) -> Path:
    """``workdir/appendonlydir``: the AOF of :func:`workload` written by redis-server (built
    once; a ``done`` file marks a complete one)."""
    aof = workdir / "appendonlydir"
    if (workdir / "done").exists():
        return aof
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    port = free_port()
    process = subprocess.Popen(redis_args(workdir, port), stdout=subprocess.DEVNULL)
    try:
        wait_ping(port, process)
        _send(port, workload(commands))
    finally:
        process.terminate()  # SIGTERM: Redis flushes the AOF and exits
        process.wait(60)
    (workdir / "done").write_text(f"{commands}\n")
    return aof
