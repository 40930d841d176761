"""moonish.redis.aof.files: each command's span in its file, and what is refused, at any feed
size."""

from __future__ import annotations

import re
from pathlib import Path

import hiredis
import pytest

from moonish.redis.aof.files import (
    FEED_BYTES,
    AofCommands,
    AofFormatError,
    resp_bytes,
)
from moonish.redis.replication.resp import encode_command
from tests.support.paths import ROOT

FIXTURES = ROOT / "fixtures" / "redis-aof"
PING = b"*1\r\n$4\r\nPING\r\n"


def spans(tmp_path: Path, data: bytes) -> tuple[list[tuple[int, int, list[bytes]]], AofCommands]:
    path = tmp_path / "appendonly.aof.1.incr.aof"
    path.write_bytes(data)
    commands = AofCommands(str(path))
    return list(commands.spans()), commands


def test_spans_of_the_real_aof_tile_the_file() -> None:
    path = FIXTURES / "mixed" / "appendonlydir" / "appendonly.aof.1.incr.aof"
    data = path.read_bytes()
    commands = AofCommands(str(path))
    pos = 0
    for offset, end, argv in commands.spans():
        assert offset == pos and data[offset:end] == encode_command(*argv)
        assert end - offset == resp_bytes(argv)
        pos = end
    assert (commands.trailing_offset, commands.trailing_bytes, pos) == (pos, 0, len(data))


@pytest.mark.parametrize(
    "argv",
    [
        [b"PING"],
        [b"SET", b"", b"x" * 9],
        [b"SET", b"k" * 10, b"v" * 99],
        [b"SET", b"k" * 100, b"v" * 999_999],
        [b"SET", b"k", b"v" * 1_000_000],  # an argument larger than a feed
        [b"DEL", *[b"k%d" % i for i in range(1000)]],
    ],
)
def test_a_span_is_the_command_as_redis_writes_it(tmp_path: Path, argv: list[bytes]) -> None:
    data = PING + encode_command(*argv) + PING
    found, commands = spans(tmp_path, data)
    size = len(encode_command(*argv))
    assert resp_bytes(argv) == size
    assert [(o, e) for o, e, _ in found] == [(0, 14), (14, 14 + size), (14 + size, 28 + size)]
    assert found[1][2] == argv and commands.trailing_bytes == 0


def test_commands_across_many_feeds(tmp_path: Path) -> None:
    argvs = [[b"SET", b"k%d" % i, b"v" * (i % 300)] for i in range(3 * FEED_BYTES // 100)]
    data = b"".join(encode_command(*argv) for argv in argvs)
    found, _ = spans(tmp_path, data)
    assert [argv for _, _, argv in found] == argvs and found[-1][1] == len(data)


@pytest.mark.parametrize(
    ("data", "offset", "message"),
    [
        (PING + b"*2\r\n$3\r\nSET\r\n:1\r\n", 14, "got [b'SET', 1]"),  # an integer argument
        (PING + b"*0\r\n", 14, "got []"),
        (b":5\r\n", 0, "got 5"),
        (b"*1\r\n*1\r\n$1\r\na\r\n", 0, "got [[b'a']]"),  # a nested array
        (b"*1\r\n$-1\r\n", 0, "got [None]"),
        (b"-ERR x\r\n", 0, "got ReplyError"),
        (b"+OK\r\n", 0, "got b'OK'"),
        (b"$2\r\nOK\r\n", 0, "got b'OK'"),
        (b"*-1\r\n", 0, "got None"),
        (PING + b"?x\r\n", 14, 'not a RESP command: Protocol error, got "?"'),
        (b"*01\r\n$4\r\nPING\r\n", 0, "not a RESP command: Bad multi-bulk length"),
        (b"*1\r\n$04\r\nPING\r\n", 0, "not a RESP command: Bad bulk string length"),
        # a simple string counted as a bulk string: past the file's end
        (b"*2\r\n$3\r\nSET\r\n+OK\r\n", 18, "not in Redis's canonical RESP form"),
        (b"*2\r\n$3\r\nSET\r\n+OK\r\n" + PING, 32, "not in Redis's canonical RESP form"),
    ],
)
def test_what_is_not_a_command_is_refused_with_its_offset(
    tmp_path: Path, data: bytes, offset: int, message: str
) -> None:
    with pytest.raises(AofFormatError, match=re.escape(message)) as info:
        spans(tmp_path, data)
    assert info.value.offset == offset


@pytest.mark.parametrize(
    ("data", "found", "trailing"),
    [
        (PING + b"*1\r\n$4\r\nPI", [(0, 14)], (14, 10)),  # a torn last command
        (PING + b"#TS:123\r\n" + PING, [(0, 14), (23, 37)], (37, 0)),  # Redis's annotation
        (PING + b"#TS:123", [(0, 14)], (14, 7)),  # a torn annotation
        (b"#TS:1\r\n" * 3, [], (21, 0)),
    ],
)
def test_annotations_are_skipped_and_a_torn_tail_is_measured(
    tmp_path: Path, data: bytes, found: list[tuple[int, int]], trailing: tuple[int, int]
) -> None:
    spanned, commands = spans(tmp_path, data)
    assert [(o, e) for o, e, _ in spanned] == found
    assert (commands.trailing_offset, commands.trailing_bytes) == trailing


def test_a_start_offset_reads_from_there(tmp_path: Path) -> None:
    path = tmp_path / "aof"
    path.write_bytes(PING + encode_command(b"SET", b"k", b"v"))
    found = list(AofCommands(str(path), start=14).spans())
    assert found == [(14, 14 + 27, [b"SET", b"k", b"v"])]


def test_hiredis_reads_the_same_commands() -> None:
    path = FIXTURES / "slice" / "appendonlydir" / "appendonly.aof.1.incr.aof"
    reader = hiredis.Reader()
    reader.feed(path.read_bytes())
    expected = list(iter(reader.gets, False))
    assert [argv for _, argv in AofCommands(str(path))] == expected
