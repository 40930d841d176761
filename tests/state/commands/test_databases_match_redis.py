"""MOVE and SWAPDB against a real redis-server: the same replies and the same databases after every
command and after the log is replayed (tests.support.redis.redis_compare ``run``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.support.redis.redis_compare import FAR, run

pytestmark = pytest.mark.redis


def test_move(server: redis.Redis, tmp_path: Path) -> None:
    run(
        server,
        tmp_path,
        [
            ["SET", "a", "1", "PXAT", FAR],
            ["HSET", "h", "f", "v"],
            ["MOVE", "a", "1"],
            ["MOVE", "a", "1"],
            ["SET", "a", "2"],
            ["MOVE", "a", "1"],
            ["MOVE", "h", "0"],
            ["MOVE", "h", "x"],
            ["MOVE", "h", "-1"],
            ["MOVE", "h", "4294967296"],
            ["MOVE", "q", "1"],
            ["MOVE", "h", "1"],
        ],
    )


def test_swapdb(server: redis.Redis, tmp_path: Path) -> None:
    server.flushall()
    run(
        server,
        tmp_path,
        [
            ["SET", "a", "1", "PXAT", FAR],
            ["RPUSH", "l", "x"],
            ["MOVE", "l", "1"],
            ["RPUSH", "l", "y"],
            ["SET", "b", "2"],
            ["MOVE", "b", "1"],
            ["SWAPDB", "0", "1"],
            ["SWAPDB", "1", "0"],
            ["SWAPDB", "0", "0"],
            ["SWAPDB", "x", "0"],
            ["SWAPDB", "0", "x"],
            ["SWAPDB", "0", "-1"],
            ["SWAPDB", "0", "4294967296"],
            ["FLUSHDB"],
            ["SWAPDB", "0", "1"],
        ],
    )
