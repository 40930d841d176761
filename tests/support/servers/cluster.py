"""A real Redis Cluster for the tests: ``masters`` redis-servers with ``--cluster-enabled yes``
on 127.0.0.1, each with ``replicas`` replicas, joined by ``redis-cli --cluster create``, started
and stopped by the tests."""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

CLUSTER_BUS_OFFSET = 10_000
"""A node's cluster bus listens on its port plus this (Redis's ``CLUSTER_PORT_INCR``)."""


NODE_PORTS = range(11_000, 22_000)
"""Where node ports are drawn from: below Linux's ephemeral range (32768+) for the port and
its bus port both, so no outgoing connection takes one between the check and the node's
bind."""


def _free_cluster_port(taken: set[int]) -> int:
    """A port that is free, and whose cluster bus port (plus 10,000) is free too."""
    for _ in range(200):
        port = random.choice(NODE_PORTS)
        if port in taken:
            continue
        try:
            for each in (port, port + CLUSTER_BUS_OFFSET):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", each))
        except OSError:
            continue
        return port
    raise AssertionError("no free port pair for a cluster node")


@dataclass
class Cluster:
    """A running cluster. ``ports``: every node's port, masters first (as created);
    ``binary``, ``workdir``: how more nodes start (:meth:`add_master`); ``tls``: the
    certificates' directory (tests.support.tls) when the nodes speak TLS only (clients, the
    cluster bus and replication), else ``None``."""

    ports: list[int]
    masters: int
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    binary: str = ""
    workdir: Path = Path()
    tls: Path | None = None
    extra: tuple[str, ...] = ()
    """More redis-server arguments, for every node."""

    def add_master(self) -> int:
        """Start a node and join it to the cluster as a master without slots
        (``redis-cli --cluster add-node``); its port once every node knows it."""
        port = _free_cluster_port(set(self.ports))
        self.processes[port] = _start(self.binary, self.workdir, port, self.tls, self.extra)
        self.ports.append(port)
        self.wait_started(port)
        cli = shutil.which("redis-cli")
        assert cli
        subprocess.run(
            [
                cli,
                *self.cli_tls(),
                "--cluster",
                "add-node",
                f"127.0.0.1:{port}",
                f"127.0.0.1:{self.ports[0]}",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            timeout=60,
        )
        for other in self.alive():
            with contextlib.closing(self.client(other)) as client:
                _wait(
                    lambda client=client: (
                        f":{port}@" in client.execute_command("CLUSTER", "NODES")
                        and client.cluster("info")["cluster_state"] == "ok"
                    ),
                    f"node {other} knows node {port}",
                )
        return port

    def wait_started(self, port: int) -> None:
        """Until the node at ``port`` answers ``PING``; fails at once, with the end of its log,
        when its process exited."""
        process = self.processes[port]

        def answers(client: redis.Redis) -> bool:
            if process.poll() is not None:
                log = self.workdir / f"node-{port}" / "redis.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise AssertionError(f"node {port} exited ({process.returncode}): {tail}")
            return bool(client.ping())

        with contextlib.closing(self.client(port)) as client:
            _wait(lambda: answers(client), f"node {port} answers PING")

    def client(self, port: int, decode: bool = True) -> redis.Redis:
        """A client of one node (text replies unless not ``decode``; the caller closes it)."""
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=decode, **self.ssl())

    def ssl(self) -> dict[str, Any]:
        """redis-py's TLS arguments for this cluster's nodes (none without TLS)."""
        if self.tls is None:
            return {}
        return {
            "ssl": True,
            "ssl_ca_certs": str(self.tls / "ca.crt"),
            "ssl_certfile": str(self.tls / "client.crt"),
            "ssl_keyfile": str(self.tls / "client.key"),
        }

    def cli_tls(self) -> list[str]:
        """redis-cli's TLS arguments for this cluster's nodes (none without TLS)."""
        if self.tls is None:
            return []
        tls = self.tls
        return [
            *("--tls", "--cacert", str(tls / "ca.crt")),
            *("--cert", str(tls / "client.crt"), "--key", str(tls / "client.key")),
        ]

    def url(self, port: int | None = None) -> str:
        scheme = "redis" if self.tls is None else "rediss"
        return f"{scheme}://127.0.0.1:{port or self.ports[0]}"

    def alive(self) -> list[int]:
        """The ports of the nodes whose process runs (not exited, not stopped by
        ``SIGSTOP``)."""
        return [port for port in self.ports if _running(self.processes[port])]

    def master_ports(self) -> list[int]:
        """The ports of the running nodes that are masters now (``ROLE``) and serve slots."""
        found = []
        for port in self.alive():
            with contextlib.closing(self.client(port)) as client:
                if client.execute_command("ROLE")[0] == "master" and _serves_slots(client):
                    found.append(port)
        return found

    def replica_of(self, master_port: int) -> int:
        """The port of the running replica of the master at ``master_port``."""
        for port in self.alive():
            with contextlib.closing(self.client(port)) as client:
                info = client.info("replication")
                if info["role"] == "slave" and info["master_port"] == master_port:
                    return port
        raise AssertionError(f"no replica of {master_port}")

    def wait_for_master(self, port: int, timeout_s: float = 30) -> None:
        """Until the node at ``port`` is a master that every running node sees serving slots,
        and the cluster is ``ok`` again."""

        def promoted() -> bool:
            for other in self.alive():
                with contextlib.closing(self.client(other)) as client:
                    if client.cluster("info")["cluster_state"] != "ok":
                        return False
            return port in self.master_ports()

        _wait(promoted, f"node {port} to be a master", timeout_s)


def _running(process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        return False
    with open(f"/proc/{process.pid}/stat", encoding="ascii") as stat:
        return stat.read().rpartition(")")[2].split()[0] != "T"


def _serves_slots(client: redis.Redis) -> bool:
    """Whether the node's own ``CLUSTER NODES`` line lists slots."""
    for line in client.execute_command("CLUSTER", "NODES").splitlines():
        words = line.split()
        if "myself" in words[2].split(","):
            return any(not word.startswith("[") for word in words[8:])
    return False


def _start(
    binary: str, workdir: Path, port: int, tls: Path | None = None, extra: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    node_dir = workdir / f"node-{port}"
    node_dir.mkdir(parents=True)
    listen = ["--port", str(port)]
    if tls is not None:  # TLS only: clients, replication and the cluster bus
        listen = [
            *("--port", "0", "--tls-port", str(port)),
            *("--tls-cluster", "yes", "--tls-replication", "yes"),
            *(
                "--tls-cert-file",
                str(tls / "server.crt"),
                "--tls-key-file",
                str(tls / "server.key"),
            ),
            *("--tls-ca-cert-file", str(tls / "ca.crt")),
        ]
    args = [
        binary,
        *listen,
        "--bind",
        "127.0.0.1",
        "--dir",
        str(node_dir),
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        f"nodes-{port}.conf",
        "--cluster-node-timeout",
        "2000",
        "--repl-diskless-sync-delay",
        "0",
        "--logfile",
        str(node_dir / "redis.log"),
        *extra,
    ]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return
        except redis.RedisError:
            pass
        assert time.monotonic() < deadline, f"the cluster did not get ready: {what}"
        time.sleep(0.1)


@contextlib.contextmanager
def redis_cluster(
    workdir: Path,
    masters: int = 3,
    replicas: int = 1,
    binary: str | None = None,
    tls: Path | None = None,
    extra: tuple[str, ...] = (),
) -> Iterator[Cluster]:
    """A cluster of ``masters`` masters (the 16,384 hash slots split evenly, as ``redis-cli
    --cluster create`` splits them) with ``replicas`` replicas each, speaking TLS only when
    ``tls`` names certificates (tests.support.tls), each node started with the redis-server
    arguments ``extra`` too; yields it once every node reports
    ``cluster_state:ok`` and every replica is in sync."""
    binary = binary or shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    assert binary, "redis-server is missing: `make install` installs it (Debian package)"
    assert cli, "redis-cli is missing: `make install` installs it (Debian package)"
    taken: set[int] = set()
    for _ in range(masters * (1 + replicas)):
        taken.add(_free_cluster_port(taken))
    cluster = Cluster(sorted(taken), masters, binary=binary, workdir=workdir, tls=tls, extra=extra)
    try:
        for port in cluster.ports:
            cluster.processes[port] = _start(binary, workdir, port, tls, extra)
        for port in cluster.ports:
            cluster.wait_started(port)
        addresses = [f"127.0.0.1:{port}" for port in cluster.ports]
        subprocess.run(
            [
                cli,
                *cluster.cli_tls(),
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            timeout=60,
        )
        for port in cluster.ports:
            with contextlib.closing(cluster.client(port)) as client:
                _wait(
                    lambda client=client: client.cluster("info")["cluster_state"] == "ok",
                    f"node {port} sees cluster_state:ok",
                )
                _wait(
                    lambda client=client: _settled(client, masters * replicas),
                    f"node {port} sees {masters * replicas} replicas, and its own link is up",
                )
        yield cluster
    finally:
        for process in cluster.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in cluster.processes.values():
            process.wait(10)


def _settled(client: redis.Redis, replicas: int) -> bool:
    """The node knows every replica as one, and is a master or a replica in sync."""
    lines = client.execute_command("CLUSTER", "NODES").splitlines()
    if sum(" slave " in f" {line.split()[2].replace(',', ' ')} " for line in lines) != replicas:
        return False
    info = client.info("replication")
    return info["role"] == "master" or info.get("master_link_status") == "up"
