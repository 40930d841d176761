"""The replica connection (moonish/redis/replication/connection.py) against a real redis-server 7.0
started here: both RDB framings read by RdbReader and equal to what Redis holds, the command
stream's offsets equal to the master's ``master_repl_offset``, ACKs shown by ``INFO
replication``, a ``+CONTINUE`` resuming at exactly the next command, a backlog overrun, ACL
users and a killed link."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from moonish.clock import FixedClock
from moonish.errors import InvalidArgumentError, UnavailableError
from moonish.redis.rdb.reader import RdbFunction, RdbKey, RdbReader
from moonish.redis.replication.connection import (
    Continue,
    FullResync,
    ReplCommand,
    ReplicaConnection,
    ReplicaOptions,
    ReplicationAuthError,
    ReplicationRefusedError,
)
from moonish.redis.replication.resp import encode_command
from moonish.values.model import Entry
from tests.support.redis.rdb_dumps import LIBRARY, fill_every_encoding
from tests.support.servers.redis_server import _free_port, comparable, redis_entries, redis_server
from tests.support.tls import make_certificates

pytestmark = pytest.mark.redis

START_US = 1_795_000_000_000_000
QUIET = ("--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "3600")
"""No 5 s wait before a diskless transfer; no PING in the stream (offsets stay the test's)."""
LARGE = bytes(range(256)) * 40_000  # 10 MB, many reads on both sides


@contextlib.contextmanager
def master(tmp_path: Path, *extra: str) -> Iterator[redis.Redis]:
    with redis_server(tmp_path, *QUIET, *extra) as client:
        yield client


def url(client: redis.Redis, credentials: str = "") -> str:
    port = client.connection_pool.connection_kwargs["port"]
    return f"redis://{credentials}127.0.0.1:{port}"


def master_offset(client: redis.Redis) -> int:
    return int(client.info("replication")["master_repl_offset"])


def read_to(link: ReplicaConnection, offset: int, timeout_s: float = 30) -> list[ReplCommand]:
    """Commands until the link stands at ``offset`` (never past it)."""
    deadline = time.monotonic() + timeout_s
    got: list[ReplCommand] = []
    while link.offset < offset:
        assert time.monotonic() < deadline, f"stuck at {link.offset}, waiting for {offset}"
        got += link.read_batch(100)
    assert link.offset == offset
    return got


def full_sync(link: ReplicaConnection) -> FullResync:
    sync = link.psync()
    assert isinstance(sync, FullResync)
    for _ in RdbReader(sync.payload, link.path):
        pass
    return sync


def replica_info(client: redis.Redis) -> dict[str, Any]:
    info = client.info("replication")
    assert info["connected_slaves"] == 1, info
    return dict(info["slave0"])


def wait_for(check: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


@pytest.mark.parametrize("diskless", ["no", "yes"])
def test_full_resync_payload_is_the_dataset(tmp_path: Path, diskless: str) -> None:
    with master(tmp_path, "--repl-diskless-sync", diskless, "--enable-debug-command", "yes") as c:
        fill_every_encoding(c)
        c.set(b"large", LARGE)
        c3 = redis.Redis(host="127.0.0.1", port=c.connection_pool.connection_kwargs["port"], db=3)
        c3.set(b"in db 3", b"x", pxat=4_102_444_800_000)
        c3.close()
        with ReplicaConnection(url(c)) as warmup:  # a backlog: offsets above 0 from now on
            full_sync(warmup)
        c.incr(b"moved the offset")
        expected: dict[int, dict[bytes, Entry | None]] = {}
        for db in (0, 3):
            c.execute_command("SELECT", db)
            keys = sorted(c.scan_iter(count=1000))
            expected[db] = dict(zip(keys, redis_entries(c, keys), strict=True))
        c.execute_command("SELECT", 0)
        offset = master_offset(c)
        assert offset > 0
        with ReplicaConnection(url(c)) as link:
            sync = link.psync()
            assert isinstance(sync, FullResync)
            assert sync.replid == c.info("replication")["master_replid"]
            assert sync.offset == offset == link.offset
            assert (sync.size_bytes is None) == (diskless == "yes")
            found: dict[int, dict[bytes, Entry]] = {0: {}, 3: {}}
            functions = []
            for item in RdbReader(sync.payload, link.path):
                if isinstance(item, RdbKey):
                    found[item.db][item.key] = Entry(item.type, item.value, item.expire_at_ms)
                elif isinstance(item, RdbFunction):
                    functions.append(item.code)
            assert functions == [LIBRARY]
            for db in (0, 3):
                assert set(found[db]) == set(expected[db])
                for key, entry in expected[db].items():
                    assert comparable(found[db][key]) == comparable(entry), key
            assert found[0][b"large"].value == LARGE
            # the stream follows the payload (diskless: only after the ACK the end sent)
            c.set(b"after", b"1")
            assert [x.argv for x in read_to(link, master_offset(c))] == [
                [b"SELECT", b"0"],
                [b"SET", b"after", b"1"],
            ]


def test_keepalive_newlines_before_a_slow_rdb(tmp_path: Path) -> None:
    with master(tmp_path, "--repl-diskless-sync", "no", "--rdb-key-save-delay", "15000") as c:
        for i in range(100):  # 100 keys x 15 ms: a BGSAVE of 1.5 s
            c.set(b"k%d" % i, i)
        with ReplicaConnection(url(c)) as link:
            sync = link.psync()
            assert isinstance(sync, FullResync)
            assert sync.keepalives >= 1
            keys = [i for i in RdbReader(sync.payload, link.path) if isinstance(i, RdbKey)]
            assert len(keys) == 100


def test_stream_offsets_equal_the_masters(tmp_path: Path) -> None:
    with master(tmp_path) as c, ReplicaConnection(url(c)) as link:
        sync = full_sync(link)
        port = c.connection_pool.connection_kwargs["port"]
        c5 = redis.Redis(host="127.0.0.1", port=port, db=5)
        c.set(b"a", b"1")
        with c.pipeline(transaction=True) as multi:
            multi.set(b"b", b"2")
            multi.rpush(b"l", b"x", b"y")
            multi.execute()
        c5.hset(b"h", b"f", b"\x00\r\n")
        c5.set(b"large", LARGE)
        c.delete(b"a", b"never existed")
        c.delete(b"never existed")  # deletes nothing: not propagated
        c5.close()
        got = read_to(link, master_offset(c))
    assert [x.argv for x in got] == [
        [b"SELECT", b"0"],
        [b"SET", b"a", b"1"],
        [b"MULTI"],
        [b"SET", b"b", b"2"],
        [b"RPUSH", b"l", b"x", b"y"],
        [b"EXEC"],
        [b"SELECT", b"5"],
        [b"HSET", b"h", b"f", b"\x00\r\n"],
        [b"SET", b"large", LARGE],
        [b"SELECT", b"0"],
        [b"DEL", b"a", b"never existed"],
    ]
    assert got[0].start_offset == sync.offset
    for before, after in itertools.pairwise(got):
        assert after.start_offset == before.end_offset
    for command in got:
        assert command.end_offset - command.start_offset == len(encode_command(*command.argv))


def test_ack_is_what_the_caller_made_durable(tmp_path: Path) -> None:
    clock = FixedClock(START_US)
    with master(tmp_path) as c, ReplicaConnection(url(c), clock=clock) as link:
        sync = full_sync(link)
        for i in range(5):
            c.set(b"k%d" % i, b"v")
        got = read_to(link, master_offset(c))  # the first read sent ACK 0
        wait_for(lambda: replica_info(c)["state"] == "online")
        assert replica_info(c)["offset"] == 0
        link.ack(sync.offset)
        link.ack(got[2].end_offset)
        clock.advance(999_000)
        assert link.read_batch(0) == []  # not due yet
        time.sleep(0.2)
        assert replica_info(c)["offset"] == 0
        clock.advance(1_000)
        assert link.read_batch(0) == []  # due: ACK <durable>, not what was received
        wait_for(lambda: replica_info(c)["offset"] == got[2].end_offset)
        assert link.durable_offset == got[2].end_offset < link.offset
        link.ack(link.offset)
        link.send_ack()
        wait_for(lambda: replica_info(c)["offset"] == master_offset(c))
        with pytest.raises(InvalidArgumentError, match="only"):
            link.ack(link.offset + 1)
        with pytest.raises(InvalidArgumentError, match="after"):
            link.ack(got[2].end_offset)


def test_getack_answered_when_durable(tmp_path: Path) -> None:
    """WAIT sends REPLCONF GETACK *; the answer is the durable offset, and a new ACK goes out
    as soon as the caller makes the waited-for offset durable (the clock never moves here)."""
    with master(tmp_path) as c, ReplicaConnection(url(c), clock=FixedClock(START_US)) as link:
        full_sync(link)
        c.set(b"k", b"v")
        set_end = master_offset(c)
        replies: list[int] = []
        waiter = threading.Thread(target=lambda: replies.append(c.wait(1, 10_000)))
        waiter.start()
        wait_for(lambda: master_offset(c) > set_end)  # the GETACK is in the stream
        got = read_to(link, master_offset(c))
        assert [x.argv for x in got][-1] == [b"REPLCONF", b"GETACK", b"*"]
        time.sleep(0.2)
        assert replies == []  # answered with the durable offset: 0
        link.ack(set_end)
        link.read_batch(0)
        waiter.join(5)
        assert replies == [1]
        assert replica_info(c)["offset"] == set_end


def test_continue_resumes_at_the_next_command(tmp_path: Path) -> None:
    with master(tmp_path) as c:
        with ReplicaConnection(url(c)) as link:
            sync = full_sync(link)
            for i in range(10):
                c.rpush(b"l", b"%d" % i)
            first = read_to(link, master_offset(c))
        resume = first[4].end_offset
        c.set(b"while away", b"1")
        with ReplicaConnection(url(c)) as link:
            again = link.psync(sync.replid, resume)
            assert again == Continue(sync.replid, resume, None)
            assert link.offset == resume
            rest = read_to(link, master_offset(c))
    assert rest[0].start_offset == resume
    assert [x.argv for x in rest] == [x.argv for x in first[5:]] + [[b"SET", b"while away", b"1"]]
    assert rest[:6] == first[5:]


def test_backlog_overrun_and_unknown_replid_resync_fully(tmp_path: Path) -> None:
    with master(tmp_path, "--repl-backlog-size", "16kb") as c:
        with ReplicaConnection(url(c)) as link:
            sync = full_sync(link)
            c.set(b"first", b"1")
            read_to(link, master_offset(c))
            durable = link.offset
        for i in range(200):
            c.set(b"k%d" % i, b"v" * 500)  # 100 KB while away: past a 16 KB backlog
        with ReplicaConnection(url(c)) as link:
            again = link.psync(sync.replid, durable)
            assert isinstance(again, FullResync)
            assert again.replid == sync.replid and again.offset == master_offset(c)
            keys = [i for i in RdbReader(again.payload, link.path) if isinstance(i, RdbKey)]
            assert len(keys) == 201
        with ReplicaConnection(url(c)) as link:
            other = link.psync("0" * 40, master_offset(c))
            assert isinstance(other, FullResync)


def test_acl_user_and_wrong_credentials(tmp_path: Path) -> None:
    with master(tmp_path) as admin:
        admin.config_set("requirepass", "s3cret")
        port = admin.connection_pool.connection_kwargs["port"]
        with redis.Redis(host="127.0.0.1", port=port, password="s3cret") as c:
            acl = ("ACL", "SETUSER")
            c.execute_command(*acl, "capture", "on", ">p@ss", "+psync", "+replconf", "+ping")
            c.execute_command(*acl, "reader", "on", ">p@ss", "+ping", "+replconf")
            c.set(b"k", b"v")
            with ReplicaConnection(url(c, "capture:p%40ss@")) as link:
                sync = link.psync()
                assert isinstance(sync, FullResync)
                items = RdbReader(sync.payload, link.path)
                assert [i.key for i in items if isinstance(i, RdbKey)] == [b"k"]
            with ReplicaConnection(url(c, ":s3cret@")) as link:  # the default user
                assert isinstance(link.psync(), FullResync)
            cases = [
                ("capture:nope@", "AUTH", "WRONGPASS"),
                (":nope@", "AUTH", "WRONGPASS"),
                ("", "PING", "NOAUTH"),
                ("reader:p%40ss@", "PSYNC", "NOPERM"),
            ]
            for credentials, step, code in cases:
                with ReplicaConnection(url(c, credentials)) as link:
                    with pytest.raises(ReplicationAuthError, match=step) as failed:
                        link.psync()
                    assert failed.value.reply.startswith(code)
                    assert "p@ss" not in str(failed.value) and "nope" not in str(failed.value)


def test_renamed_psync_is_refused(tmp_path: Path) -> None:
    """What managed services do: replication is not available; the AOF path is."""
    with master(tmp_path, "--rename-command", "PSYNC", "") as c, ReplicaConnection(url(c)) as link:
        with pytest.raises(ReplicationRefusedError, match="wal import-aof") as refused:
            link.psync()
        assert refused.value.reply.startswith("ERR unknown command")


def test_killed_link_raises_unavailable_with_the_last_offset(tmp_path: Path) -> None:
    with master(tmp_path) as c, ReplicaConnection(url(c)) as link:
        full_sync(link)
        c.set(b"k", b"v")
        got = read_to(link, master_offset(c))
        c.client_kill_filter(_type="replica")
        with pytest.raises(UnavailableError, match=r"closed|failed") as lost:
            while True:
                link.read_batch(100)
        assert lost.value.offset == got[-1].end_offset == link.offset


def test_payload_must_be_read_first(tmp_path: Path) -> None:
    with master(tmp_path) as c:
        c.set(b"k", b"v")
        with ReplicaConnection(url(c)) as link:
            sync = link.psync()
            assert isinstance(sync, FullResync)
            with pytest.raises(InvalidArgumentError, match="payload"):
                link.read_batch(0)
            sync.payload.read(9)  # the RDB header: the rest is still unread
            with pytest.raises(InvalidArgumentError, match="payload"):
                link.read_batch(0)
            with pytest.raises(InvalidArgumentError, match="psync was called"):
                link.psync()


def test_connection_refused_is_unavailable(tmp_path: Path) -> None:
    with master(tmp_path) as c:
        address = url(c)
    link = ReplicaConnection(address, ReplicaOptions(connect_timeout_ms=2000))
    with pytest.raises(UnavailableError, match="cannot connect"):
        link.psync()
    link.close()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, and a server and a client certificate it signed for 127.0.0.1."""
    return make_certificates(tmp_path_factory.mktemp("tls"))


def test_tls_master(tmp_path: Path, certificates: Path) -> None:
    tls_port = _free_port()
    tls = (
        "--tls-port",
        str(tls_port),
        "--tls-cert-file",
        certificates / "server.crt",
        "--tls-key-file",
        certificates / "server.key",
        "--tls-ca-cert-file",
        certificates / "ca.crt",
    )
    address = f"rediss://127.0.0.1:{tls_port}"
    trusted = ReplicaOptions(
        tls_ca_file=str(certificates / "ca.crt"),
        tls_cert_file=str(certificates / "client.crt"),
        tls_key_file=str(certificates / "client.key"),
    )
    with master(tmp_path, *map(str, tls)) as c:
        c.set(b"k", b"v")
        with ReplicaConnection(address, trusted) as link:
            sync = link.psync()
            assert isinstance(sync, FullResync)
            items = RdbReader(sync.payload, link.path)
            assert [i.key for i in items if isinstance(i, RdbKey)] == [b"k"]
            c.set(b"over", b"tls")
            got = read_to(link, master_offset(c))
            assert [x.argv for x in got] == [[b"SELECT", b"0"], [b"SET", b"over", b"tls"]]
            assert link.path == address
        link = ReplicaConnection(address)  # the system's CAs do not know this one
        with link, pytest.raises(InvalidArgumentError, match="not trusted"):
            link.psync()
        link = ReplicaConnection(address, ReplicaOptions(tls_ca_file=trusted.tls_ca_file))
        with link, pytest.raises(UnavailableError):  # no client certificate
            link.psync()
    with pytest.raises(InvalidArgumentError, match="rediss"):
        ReplicaConnection("redis://127.0.0.1", trusted)
