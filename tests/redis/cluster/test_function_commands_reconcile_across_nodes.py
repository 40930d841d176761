"""A cluster's ``FUNCTION`` commands against moonish's one set of libraries
(moonish.redis.cluster.functions, .order): each master's load, delete, flush and restore does
on moonish's libraries what it did on its node; against a real cluster on 127.0.0.1, a library
loaded on every master is loaded once, one loaded with other code on another node replaces it
with an event, and a capture that runs through all of it equals the cluster."""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path

import orjson
import pytest

import moonish
from moonish.cdc import shard_read
from moonish.redis.cluster.functions import reconcile
from moonish.state.libraries import PREFIX
from tests.support.redis.capture import our_state
from tests.support.redis.cluster import (
    assert_same_keyspace,
    caught_up_report,
    cluster_state,
    follow,
    writer,
)
from tests.support.servers.cluster import Cluster
from tests.support.servers.redis_server import shard_writer


def library(name: str, function: str, call: str = "SET") -> bytes:
    """A Lua library ``name`` whose ``function`` runs ``call`` on its key and argument."""
    body = f"function(k, a) return redis.call('{call}', k[1], a[1]) end"
    return f"#!lua name={name}\nredis.register_function('{function}', {body})".encode()


V1 = library("lib", "put")
V2 = library("lib", "put", "set")  # the same library, other code
HELD = {b"lib": V1}


@pytest.mark.parametrize(
    ("argv", "held", "expected", "replaced"),
    [
        ([b"FUNCTION", b"LOAD", V1], HELD, [], None),
        ([b"FUNCTION", b"LOAD", V2], HELD, [b"FUNCTION", b"LOAD", b"REPLACE", V2], b"lib"),
        ([b"FUNCTION", b"LOAD", V1], {}, [b"FUNCTION", b"LOAD", V1], None),
        (
            [b"FUNCTION", b"LOAD", b"REPLACE", V2],
            HELD,
            [b"FUNCTION", b"LOAD", b"REPLACE", V2],
            None,
        ),
        ([b"FUNCTION", b"LOAD", b"no shebang"], HELD, [b"FUNCTION", b"LOAD", b"no shebang"], None),
        ([b"FUNCTION", b"DELETE", b"lib"], {}, [], None),
        ([b"FUNCTION", b"DELETE", b"lib"], HELD, [b"FUNCTION", b"DELETE", b"lib"], None),
        ([b"FUNCTION", b"FLUSH"], {}, [], None),
        ([b"FUNCTION", b"FLUSH", b"ASYNC"], HELD, [b"FUNCTION", b"FLUSH", b"ASYNC"], None),
        ([b"FUNCTION", b"RESTORE", b"p"], HELD, [b"FUNCTION", b"RESTORE", b"p", b"REPLACE"], None),
        (
            [b"FUNCTION", b"RESTORE", b"p", b"append"],
            HELD,
            [b"FUNCTION", b"RESTORE", b"p", b"REPLACE"],
            None,
        ),
        (
            [b"FUNCTION", b"RESTORE", b"p", b"FLUSH"],
            HELD,
            [b"FUNCTION", b"RESTORE", b"p", b"FLUSH"],
            None,
        ),
    ],
)
def test_a_function_command_does_what_it_did_on_its_node(
    argv: list[bytes], held: dict[bytes, bytes], expected: list[bytes], replaced: bytes | None
) -> None:
    assert reconcile(argv, held) == (expected, replaced)


def libraries_of(data: Path) -> list[dict[bytes, bytes]]:
    found = []
    for shard_dir in moonish.shard_dirs(data):
        with shard_writer(Path(shard_dir)) as shard:
            found.append(dict(shard.libraries))
    return found


def function_changes(data: Path) -> list[dict[str, object]]:
    """The content of every shard's ``moonish.function`` message records."""
    found = []
    for shard_dir in moonish.shard_dirs(data):
        with shard_read.tail(shard_dir, 1, messages=True) as reader:
            for event in reader:
                envelope = orjson.loads(event.envelope)
                if envelope["op"] == "m" and envelope["message"]["prefix"] == PREFIX:
                    found.append(orjson.loads(base64.b64decode(envelope["message"]["content"])))
    return found


@pytest.mark.redis
@pytest.mark.parametrize("processes", [1, 2])  # 2: reconciled against the libraries' copy
def test_functions_loaded_on_every_master_are_captured_once(
    cluster: Cluster, tmp_path: Path, processes: int
) -> None:
    data = tmp_path / "data"
    following = follow(cluster, data, processes=processes)
    caught_up_report(following, cluster)
    first, *others = cluster.master_ports()
    for port in [first, *others]:  # as redis-cli --cluster call does
        with contextlib.closing(cluster.client(port, decode=False)) as node:
            node.execute_command("FUNCTION", "LOAD", V1)
            node.execute_command("FUNCTION", "LOAD", library("gone", "gone"))
    client = writer(cluster)
    for number in range(50):
        client.execute_command("FCALL", "put", 1, f"f:{number}", number)
    for port in [first, *others]:
        with contextlib.closing(cluster.client(port)) as node:
            node.execute_command("FUNCTION", "DELETE", "gone")
    with contextlib.closing(cluster.client(others[0], decode=False)) as node:
        node.execute_command("FUNCTION", "LOAD", "REPLACE", V2)  # that node's code differs
    with contextlib.closing(cluster.client(first, decode=False)) as node:
        node.execute_command("FUNCTION", "LOAD", library("late", "late", "set"))
    with contextlib.closing(cluster.client(others[1], decode=False)) as node:
        node.execute_command("FUNCTION", "LOAD", library("late", "late"))
    client.close()
    caught_up_report(following, cluster)
    following.finish()
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    assert libraries_of(data) == [{b"lib": V2, b"late": library("late", "late")}] * 4
    loads = [change for change in function_changes(data) if change["command"] == "load"]
    # per shard: lib and gone once (not once per master), lib's REPLACE, late, late replaced
    assert len(loads) == 5 * 4
    assert any("late replaced" in event.text for event in following.events)


@pytest.mark.redis
def test_full_resyncs_of_nodes_with_different_libraries_keep_them_all(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Each link's full resync loads its node's libraries on top of the other nodes' (the
    first start's three, and a link's own again after its backlog is gone)."""
    data = tmp_path / "data"
    ports = cluster.master_ports()
    for port in ports:
        with contextlib.closing(cluster.client(port, decode=False)) as node:
            node.execute_command("FUNCTION", "LOAD", V1)
            node.execute_command("FUNCTION", "LOAD", library(f"only{port}", f"only{port}"))
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    report = following.finish()
    assert report.full_resyncs == 3
    every = {b"lib": V1} | {
        f"only{port}".encode(): library(f"only{port}", f"only{port}") for port in ports
    }
    assert libraries_of(data) == [every] * 4
    loads = [change for change in function_changes(data) if change["command"] == "load"]
    assert len(loads) == 4 * 4  # per shard: lib once, and each node's own
