"""The replication protocol's bytes without a server: the command splitter (resp.py) under every
chunking, the handshake as Redis's replica sends it, both payload framings cut anywhere,
a link dropped mid-command, error replies and URLs. A scripted socket plays the master."""

from __future__ import annotations

import itertools
import socket
import tracemalloc
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonish.clock import FixedClock
from moonish.errors import InvalidArgumentError, UnavailableError
from moonish.redis.replication.connection import (
    Continue,
    FullResync,
    RedisAddress,
    ReplCommand,
    ReplicaConnection,
    ReplicaOptions,
    ReplicationAuthError,
    ReplicationProtocolError,
    ReplicationRefusedError,
    ReplicationUnavailableError,
    parse_redis_url,
)
from moonish.redis.replication.resp import CommandSplitter, encode_command

REPLID = "a" * 39 + "b"
MARK = b"0123456789abcdef0123456789abcdef01234567"
REDIS_INFO = b"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"
INFO_REPLY = b"$%d\r\n%s\r\n" % (len(REDIS_INFO), REDIS_INFO)
HANDSHAKE_REPLIES = b"+PONG\r\n" + INFO_REPLY + b"+OK\r\n+OK\r\n"
argvs = st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=4), max_size=12)


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


class ScriptedMaster:
    """A socket whose peer sends ``parts`` (each a list of chunks); a part after the first is
    released only once the replica sent ``REPLCONF ACK`` (as a master starts the stream
    after a diskless RDB). Silence is a timeout; the end of the script a closed link."""

    def __init__(self, *parts: list[bytes], silence_at_end: bool = False) -> None:
        self.parts = deque(deque(p) for p in parts)
        self.sent = bytearray()
        self.silence_at_end = silence_at_end
        self.closed = False

    def recv(self, max_bytes: int) -> bytes:
        while self.parts and not self.parts[0]:
            if b"ACK" not in self.sent:
                raise TimeoutError
            self.parts.popleft()
        if not self.parts:
            if self.silence_at_end:
                raise TimeoutError
            return b""
        chunk = self.parts[0].popleft()
        if len(chunk) > max_bytes:
            self.parts[0].appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        return chunk

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def settimeout(self, timeout_s: float) -> None:
        pass

    def setsockopt(self, *args: Any) -> None:
        pass

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 54321)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ScriptedMaster]]:
    """Install masters: the next ReplicaConnection talks to ``masters[0]``."""
    masters: list[ScriptedMaster] = []
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: masters.pop(0))
    yield masters


def stream_of(commands: list[list[bytes]]) -> bytes:
    return b"".join(encode_command(*argv) for argv in commands)


def drain(link: ReplicaConnection) -> tuple[list[ReplCommand], UnavailableError]:
    got: list[ReplCommand] = []
    while True:
        try:
            got += link.read_batch(0)
        except UnavailableError as exc:
            return got, exc


@settings(max_examples=200, deadline=None)
@given(argvs, st.lists(st.integers(min_value=0), max_size=30), st.integers(0, 10**12))
def test_splitter_any_chunking(commands: list[list[bytes]], cuts: list[int], start: int) -> None:
    data = stream_of(commands)
    splitter = CommandSplitter(start, "redis://test:1")
    got: list[ReplCommand] = []
    for chunk in cut(data, cuts):
        splitter.feed(chunk)
        got += splitter.commands()
    assert [c.argv for c in got] == commands
    offset = start
    for command in got:
        assert command.start_offset == offset
        offset = command.end_offset
        assert offset - command.start_offset == len(encode_command(*command.argv))
    assert splitter.offset == offset == start + len(data)
    assert splitter.buffered_bytes == 0


def test_splitter_large_value_one_byte_at_a_time() -> None:
    value = bytes(range(256)) * 20
    data = stream_of([[b"SET", b"k", value], [b"PING"]])
    splitter = CommandSplitter(7, "redis://test:1")
    got = []
    for i in range(len(data)):
        splitter.feed(data[i : i + 1])
        got += splitter.commands()
        assert splitter.buffered_bytes + (got[-1].end_offset - 7 if got else 0) == i + 1
    assert got == [
        ReplCommand(7, 7 + len(data) - 14, [b"SET", b"k", value]),
        ReplCommand(7 + len(data) - 14, 7 + len(data), [b"PING"]),
    ]


DAMAGE = {
    "inline": b"PING\r\n",
    "resp3": b"*1\r\n+OK\r\n",
    "no crlf after bulk": b"*1\r\n$2\r\nokXY",
    "bad count": b"*x\r\n",
    "empty array": b"*0\r\n",
    "leading zero": b"*01\r\n$1\r\na\r\n",
    "null bulk": b"*1\r\n$-1\r\n",
    "spaced length": b"*1\r\n$ 1\r\na\r\n",
    "endless count": b"*" + b"1" * 40,
    "endless length": b"*1\r\n$" + b"1" * 40,
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_splitter_damage_after_whole_commands(name: str) -> None:
    good = stream_of([[b"SELECT", b"0"], [b"SET", b"k", b"v"]])
    splitter = CommandSplitter(100, "redis://test:1")
    splitter.feed(good + DAMAGE[name])
    assert [c.argv for c in splitter.commands()] == [[b"SELECT", b"0"], [b"SET", b"k", b"v"]]
    with pytest.raises(ReplicationProtocolError, match="replication stream") as damaged:
        splitter.commands()
    assert damaged.value.offset == 100 + len(good)
    assert damaged.value.path == "redis://test:1"


def full_resync_bytes(payload: bytes, diskless: bool, keepalives: int = 2) -> bytes:
    head = b"\n+FULLRESYNC %s 1000\r\n" % REPLID.encode() + b"\n" * keepalives
    if diskless:
        return head + b"$EOF:" + MARK + b"\r\n" + payload + MARK
    return head + b"$%d\r\n" % len(payload) + payload


@settings(max_examples=150, deadline=None)
@given(
    st.booleans(),
    st.binary(max_size=300),
    argvs,
    st.lists(st.integers(min_value=0), max_size=40),
    st.binary(min_size=1, max_size=20),
)
def test_conversation_cut_anywhere(
    diskless: bool, payload: bytes, commands: list[list[bytes]], cuts: list[int], torn: bytes
) -> None:
    """Every reply, keep-alive, payload byte and command arrives in arbitrary pieces; the link
    then drops inside a command: the payload and the whole commands come out exact."""
    commands = [[b"SELECT", b"0"], *commands]
    stream = stream_of(commands)
    torn_command = encode_command(b"SET", torn)[: -1 - len(torn) // 2]
    auth_replies = b"+PONG\r\n+OK\r\n" + HANDSHAKE_REPLIES[7:]  # the URL has a password
    before = auth_replies + full_resync_bytes(payload, diskless)
    after = stream + torn_command
    if diskless:
        fake = ScriptedMaster(cut(before, cuts), cut(after, cuts))
    else:
        fake = ScriptedMaster(cut(before + after, cuts))
    masters = [fake]
    original = socket.create_connection
    socket.create_connection = lambda *a, **k: masters.pop(0)  # type: ignore[assignment]
    try:
        with ReplicaConnection("redis://u:p@master:6380", clock=FixedClock(0)) as link:
            sync = link.psync()
            assert isinstance(sync, FullResync)
            assert (sync.replid, sync.offset, sync.keepalives) == (REPLID, 1000, 2)
            assert sync.size_bytes == (None if diskless else len(payload))
            assert sync.payload.read() == payload
            got, dropped = drain(link)
    finally:
        socket.create_connection = original  # type: ignore[assignment]
    assert [c.argv for c in got] == commands
    assert got[0].start_offset == 1000
    assert dropped.offset == got[-1].end_offset == 1000 + len(stream) == link.offset
    assert "closed" in str(dropped) and dropped.path == "redis://master:6380"
    handshake = stream_of(
        [
            [b"PING"],
            [b"AUTH", b"u", b"p"],
            [b"INFO", b"server"],
            [b"REPLCONF", b"listening-port", b"54321"],
            [b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"],
            [b"PSYNC", b"?", b"-1"],
        ]
    )
    ack = encode_command(b"REPLCONF", b"ACK", b"0")
    assert bytes(fake.sent) == handshake + ack + (ack if diskless else b"")
    assert fake.closed


def test_continue_and_new_replid(scripted: list[ScriptedMaster]) -> None:
    new = "c" * 40
    ping = stream_of([[b"ping"]])
    scripted.append(ScriptedMaster([HANDSHAKE_REPLIES + b"+CONTINUE\r\n" + ping]))
    scripted.append(ScriptedMaster([HANDSHAKE_REPLIES + b"\n\n+CONTINUE %s\r\n" % new.encode()]))
    options = ReplicaOptions(listening_port=7000)
    with ReplicaConnection("redis://master", options) as link:
        assert link.psync(REPLID, 41) == Continue(REPLID, 41, None)
        assert link.read_batch(0) == [ReplCommand(41, 41 + len(ping), [b"ping"])]
        assert link.durable_offset == 41
    with ReplicaConnection("redis://master", options) as link:
        assert link.psync(REPLID, 41) == Continue(new, 41, REPLID)
        assert link.replid == new


def test_handshake_bytes_for_a_continue(scripted: list[ScriptedMaster]) -> None:
    fake = ScriptedMaster([b"-NOAUTH Authentication required.\r\n+OK\r\n" + HANDSHAKE_REPLIES[7:]])
    fake.parts[0].append(b"+CONTINUE\r\n")
    scripted.append(fake)
    with ReplicaConnection("redis://:pw@master", ReplicaOptions(listening_port=7000)) as link:
        link.psync(REPLID, 99)
    assert bytes(fake.sent) == stream_of(
        [
            [b"PING"],
            [b"AUTH", b"pw"],
            [b"INFO", b"server"],
            [b"REPLCONF", b"listening-port", b"7000"],
            [b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"],
            [b"PSYNC", REPLID.encode(), b"100"],
        ]
    )


REPLIES: dict[str, tuple[bytes, type[Exception], str]] = {
    "loading": (
        b"-LOADING Redis is loading the dataset in memory",
        ReplicationUnavailableError,
        "cannot serve a replica now",
    ),
    "no master link": (b"-NOMASTERLINK Can't SYNC", ReplicationUnavailableError, "NOMASTERLINK"),
    "noperm": (
        b"-NOPERM this user has no permissions",
        ReplicationAuthError,
        "refused PSYNC: NOPERM",
    ),
    "unknown": (b"-ERR unknown command 'PSYNC'", ReplicationRefusedError, "wal import-aof"),
    "bad fullresync": (b"+FULLRESYNC short 0", ReplicationProtocolError, "PSYNC"),
    "bad offset": (b"+FULLRESYNC %s x" % REPLID.encode(), ReplicationProtocolError, "offset"),
    "continue unasked": (b"+CONTINUE", ReplicationProtocolError, "PSYNC"),
    "aborted transfer": (
        b"+FULLRESYNC %s 0\r\n\n-ERR BGSAVE failed" % REPLID.encode(),
        ReplicationUnavailableError,
        "aborted",
    ),
    "bad header": (b"+FULLRESYNC %s 0\r\n#5" % REPLID.encode(), ReplicationProtocolError, "header"),
    "short mark": (
        b"+FULLRESYNC %s 0\r\n$EOF:abc" % REPLID.encode(),
        ReplicationProtocolError,
        "EOF:abc",
    ),
    "not text": (b"+\xff\xfe", ReplicationProtocolError, "not text"),
}


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_psync_replies(scripted: list[ScriptedMaster], name: str) -> None:
    reply, error, match = REPLIES[name]
    scripted.append(ScriptedMaster([HANDSHAKE_REPLIES + reply + b"\r\n"]))
    with ReplicaConnection("redis://master") as link, pytest.raises(error, match=match) as failed:
        link.psync()
    assert failed.value.path == "redis://master:6379"  # type: ignore[attr-defined]


def test_ping_errors(scripted: list[ScriptedMaster]) -> None:
    scripted.append(ScriptedMaster([b"-NOAUTH Authentication required.\r\n"]))
    scripted.append(ScriptedMaster([b"-LOADING Redis is loading\r\n"]))
    scripted.append(ScriptedMaster([b"+PONG\r\n-ERR unknown option\r\n" + HANDSHAKE_REPLIES[7:]]))
    with ReplicaConnection("redis://master") as link, pytest.raises(ReplicationAuthError):
        link.psync()
    with ReplicaConnection("redis://master") as link, pytest.raises(ReplicationUnavailableError):
        link.psync()
    with ReplicaConnection("redis://:pw@master") as link, pytest.raises(ReplicationAuthError):
        link.psync()  # the AUTH reply is the error


def test_truncated_payload_and_silence(scripted: list[ScriptedMaster]) -> None:
    sized = HANDSHAKE_REPLIES + full_resync_bytes(b"REDIS0010" + b"x" * 50, diskless=False)
    scripted.append(ScriptedMaster([sized[:-10]]))
    scripted.append(ScriptedMaster([HANDSHAKE_REPLIES + b"+FULLRESYNC %s 0\r\n" % REPLID.encode()]))
    scripted[-1].silence_at_end = True
    with ReplicaConnection("redis://master") as link:
        sync = link.psync()
        with pytest.raises(UnavailableError, match="after 49 of the RDB's 59 bytes"):
            sync.payload.read()
    link = ReplicaConnection("redis://master", ReplicaOptions(timeout_ms=5))
    with link, pytest.raises(UnavailableError, match="no data from the master for 5 ms"):
        link.psync()


def test_periodic_ack_and_master_silence(scripted: list[ScriptedMaster]) -> None:
    clock = FixedClock(1_000_000)
    fake = ScriptedMaster([HANDSHAKE_REPLIES + b"+CONTINUE\r\n"], silence_at_end=True)
    scripted.append(fake)
    options = ReplicaOptions(timeout_ms=30_000, ack_interval_ms=1000)
    with ReplicaConnection("redis://master", options, clock) as link:
        link.psync(REPLID, 500)
        sent = len(fake.sent)
        ack = encode_command(b"REPLCONF", b"ACK", b"500")
        assert link.read_batch(0) == []
        assert bytes(fake.sent[sent:]) == ack  # the first read: at once
        clock.advance(999_999)
        assert link.read_batch(0) == []
        assert bytes(fake.sent[sent:]) == ack
        clock.advance(1)
        assert link.read_batch(0) == []
        assert bytes(fake.sent[sent:]) == ack * 2
        link.send_ack()
        assert bytes(fake.sent[sent:]) == ack * 3
        clock.advance(30_000_000)
        with pytest.raises(UnavailableError, match="no data from the master") as silent:
            link.read_batch(0)
        assert silent.value.offset == 500


def test_misuse(scripted: list[ScriptedMaster]) -> None:
    link = ReplicaConnection("redis://master")
    with pytest.raises(InvalidArgumentError, match="psync first"):
        link.read_batch(0)
    with pytest.raises(InvalidArgumentError, match="both"):
        link.psync(REPLID)
    with pytest.raises(InvalidArgumentError, match="40 hex"):
        link.psync("x" * 40, 1)
    with pytest.raises(InvalidArgumentError, match="negative"):
        link.psync(REPLID, -1)
    link.close()


URLS: dict[str, RedisAddress | str] = {
    "redis://host": RedisAddress("host", 6379, None, None),
    "redis://host:6380/3": RedisAddress("host", 6380, None, None),
    "redis://:pw@host": RedisAddress("host", 6379, None, "pw"),
    "redis://user:p%40ss%3A@10.0.0.1:7000": RedisAddress("10.0.0.1", 7000, "user", "p@ss:"),
    "redis://[::1]:7000": RedisAddress("::1", 7000, None, None),
    "rediss://:pw@host:7000": RedisAddress("host", 7000, None, "pw", tls=True),
    "http://host": "not a redis",
    "redis://user@host": "without a password",
    "redis://host:99999": "bad port",
    "redis://host:x": "bad port",
    "redis://:pw@": "no host",
    "redis://host/x": "bad db",
    "redis://host?ssl=true": "query",
}


@pytest.mark.parametrize("url", sorted(URLS))
def test_urls(url: str) -> None:
    expected = URLS[url]
    if isinstance(expected, RedisAddress):
        assert parse_redis_url(url) == expected
        assert "pw" not in repr(expected) and "p@ss" not in repr(expected)
    else:
        with pytest.raises(InvalidArgumentError, match=expected) as refused:
            parse_redis_url(url)
        assert "pw" not in str(refused.value)
    assert parse_redis_url("redis://[::1]:7000").path == "redis://[::1]:7000"
    assert parse_redis_url("rediss://h").path == "rediss://h:6379"


@pytest.mark.parametrize("diskless", [False, True])
def test_payload_memory_is_bounded(scripted: list[ScriptedMaster], diskless: bool) -> None:
    """A 20 MiB payload read in 1 MiB pieces never holds more than a few reads."""
    block = bytes(range(256)) * 256  # 64 KiB, the same object sent 320 times
    head = HANDSHAKE_REPLIES + b"+FULLRESYNC %s 0\r\n" % REPLID.encode()
    if diskless:
        scripted.append(ScriptedMaster([head + b"$EOF:" + MARK + b"\r\n", *[block] * 320, MARK]))
    else:
        scripted.append(ScriptedMaster([head + b"$%d\r\n" % (320 * len(block)), *[block] * 320]))
    with ReplicaConnection("redis://master") as link:
        sync = link.psync()
        assert isinstance(sync, FullResync)
        tracemalloc.start()
        try:
            total = 0
            while piece := sync.payload.read(1 << 20):
                assert piece[:256] == block[:256]
                total += len(piece)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert total == 320 * len(block)
        assert peak < 4 << 20


VALKEY_INFO = b"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n"


def test_valkey_is_told_the_replica_version(scripted: list[ScriptedMaster]) -> None:
    """``INFO server`` names ``valkey_version``: ``REPLCONF version 9.0.0`` follows the capas
    (Valkey 9 then sends ``VALKEY080``); Redis never gets it (it refuses unknown options)."""
    info = b"$%d\r\n%s\r\n" % (len(VALKEY_INFO), VALKEY_INFO)
    fake = ScriptedMaster([b"+PONG\r\n" + info + b"+OK\r\n+OK\r\n+OK\r\n+CONTINUE\r\n"])
    scripted.append(fake)
    with ReplicaConnection("redis://master", ReplicaOptions(listening_port=7000)) as link:
        link.psync(REPLID, 99)
        assert link.valkey_version == "9.1.2"
    assert bytes(fake.sent) == stream_of(
        [
            [b"PING"],
            [b"INFO", b"server"],
            [b"REPLCONF", b"listening-port", b"7000"],
            [b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"],
            [b"REPLCONF", b"version", b"9.0.0"],
            [b"PSYNC", REPLID.encode(), b"100"],
        ]
    )


def test_an_info_the_user_may_not_run_means_redis_s_handshake(
    scripted: list[ScriptedMaster],
) -> None:
    fake = ScriptedMaster([b"+PONG\r\n-NOPERM no INFO for you\r\n+OK\r\n+OK\r\n+CONTINUE\r\n"])
    scripted.append(fake)
    with ReplicaConnection("redis://master", ReplicaOptions(listening_port=7000)) as link:
        link.psync(REPLID, 99)
        assert link.valkey_version is None
    assert b"version" not in bytes(fake.sent)
    assert bytes(fake.sent).endswith(encode_command(b"PSYNC", REPLID.encode(), b"100"))


def test_a_bad_info_reply(scripted: list[ScriptedMaster]) -> None:
    scripted.append(ScriptedMaster([b"+PONG\r\n+OK\r\n+OK\r\n+OK\r\n"]))
    with (
        ReplicaConnection("redis://master") as link,
        pytest.raises(ReplicationProtocolError, match="INFO server"),
    ):
        link.psync()
