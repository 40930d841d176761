"""``cdc info``'s ``next_lsn`` is the LSN the next append gets: after the LSNs a torn tail
names (which the next writer discards before it appends), also before a writer has cut it;
``torn_tail_lsns`` names them, and ``discarded``/``torn`` the ranges control.json holds."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from moonish.cdc import shard_read
from tests.support.cli import run
from tests.support.golden import as_if_killed, frame_spans, segments
from tests.support.wal import kv, open_writer


def torn_batch(shard: Path) -> None:
    """Records 1..3, then a batch of LSNs 4 and 5 whose last frame a power loss cut short:
    both frame headers are there, so LSNs 4 and 5 were used."""
    with open_writer(shard, heartbeat_ms=None) as writer:
        for i in range(3):
            writer.append(kv(b"key-%d" % i))
        writer.append_batch([kv(b"big-%d" % i, b"x" * 3000) for i in range(2)])
    as_if_killed(shard)
    os.remove(shard / "heartbeat.json")  # only the tail's own headers tell
    seg = segments(shard)[-1]
    os.truncate(seg, frame_spans(seg)[-1][0] + 1000)


def test_info_before_the_cut_gives_the_lsn_after_the_torn_tail(shard: Path) -> None:
    torn_batch(shard)
    info = shard_read.info(shard)
    assert (info["latest_lsn"], info["next_lsn"], info["torn_tail_lsns"]) == (3, 6, [4, 5])
    assert (info["discarded"], info["torn"]) == ([], [])
    shown = run("cdc", "info", str(shard))
    assert shown.returncode == 0, shown.stderr
    facts = orjson.loads(shown.stdout)
    assert (facts["next_lsn"], facts["torn_tail_lsns"]) == (6, [4, 5])
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after")) == 6


def test_info_after_the_cut_shows_the_torn_range(shard: Path) -> None:
    torn_batch(shard)
    with open_writer(shard):
        pass
    info = shard_read.info(shard)
    assert (info["latest_lsn"], info["next_lsn"], info["torn_tail_lsns"]) == (3, 6, None)
    assert (info["discarded"], info["torn"]) == ([[4, 5]], [[4, 5]])
