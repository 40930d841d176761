"""Redis Sentinel for the tests: sentinels (``redis-server <conf> --sentinel``) on 127.0.0.1
watching a master, started and stopped by the tests."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from tests.support.servers.redis_server import _free_port

MASTER_NAME = "mymaster"


@contextlib.contextmanager
def sentinels(
    workdir: Path, master_port: int, count: int = 3, quorum: int = 2
) -> Iterator[list[redis.Redis]]:
    """``count`` sentinels monitoring the master on ``master_port`` as :data:`MASTER_NAME`
    (down after 1 s, failover timeout 5 s); yields a client of each (text replies)."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is missing: `make install` installs it (Debian package)"
    processes: list[subprocess.Popen[bytes]] = []
    clients: list[redis.Redis] = []
    try:
        for number in range(count):
            port = _free_port()
            conf = workdir / f"sentinel-{number}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {workdir}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {quorum}\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                f"sentinel failover-timeout {MASTER_NAME} 5000\n"
            )
            processes.append(
                subprocess.Popen(
                    [binary, str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                )
            )
            clients.append(redis.Redis(host="127.0.0.1", port=port, decode_responses=True))
        deadline = time.monotonic() + 30
        for client in clients:
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    assert time.monotonic() < deadline, "a sentinel did not start"
                    time.sleep(0.05)
        yield clients
    finally:
        for client in clients:
            client.close()
        for process in processes:
            process.terminate()
            process.wait(10)


def sentinel_url(clients: list[redis.Redis]) -> str:
    hosts = ",".join(
        f"127.0.0.1:{client.connection_pool.connection_kwargs['port']}" for client in clients
    )
    return f"redis+sentinel://{hosts}/{MASTER_NAME}"


def master_port(client: redis.Redis) -> int:
    """The port of the master the sentinel ``client`` names now."""
    _, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
    return int(port)
