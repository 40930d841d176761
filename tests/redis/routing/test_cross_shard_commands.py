"""Commands across shards: SWAPDB on every shard, *STORE and SORT BY/GET over keys of several
shards run once; on a rerun, a command cut between its shards is refused and one that changed
nothing in a shard is known to be done."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import moonish
from moonish.redis.aof.importer import import_aof
from moonish.redis.routing.router import ResumeError
from tests.support.redis.aof import INCR, records, resp, write_aof
from tests.support.servers.redis_server import shard_writer


def test_a_cross_shard_command_cut_between_its_shards_is_refused(tmp_path: Path) -> None:
    """RENAME of a key of shard 0 to a key of shard 1, killed after shard 0's append: the
    rerun cannot complete it exactly once, and says so instead of guessing."""
    first = [resp(b"SET", b"a", b"1"), resp(b"SET", b"b0", b"2")]
    aof = write_aof(tmp_path, first)
    import_aof(aof, tmp_path / "data", 2)
    (aof / INCR).write_bytes(b"".join([*first, resp(b"RENAME", b"a", b"b0")]))
    import_aof(aof, tmp_path / "whole", 2)
    assert [len(changes) for changes in records(tmp_path / "data")] == [1, 1]
    assert [len(changes) for changes in records(tmp_path / "whole")] == [2, 2]  # and RENAME's
    # What a kill between the two shards' appends of the RENAME leaves: shard 0 has them
    # (the import's appends are in shard order), shard 1 not. (Built from two imports: the
    # shard writer's append cannot be patched to raise, compiled by mypyc: docs/build.md.)
    shutil.rmtree(tmp_path / "data" / "shard-0")
    shutil.copytree(tmp_path / "whole" / "shard-0", tmp_path / "data" / "shard-0")
    with pytest.raises(ResumeError, match="RENAME changes keys of shards"):
        import_aof(aof, tmp_path / "data", 2)


def test_a_cross_shard_command_that_changed_nothing_in_a_shard_reruns(tmp_path: Path) -> None:
    """COPY from shard 1 to shard 0 writes no record in shard 1; its position still moves
    past the COPY (a position marker), so a rerun knows both shards hold it."""
    aof = write_aof(tmp_path, [resp(b"SET", b"a", b"1"), resp(b"COPY", b"a", b"b0")])
    first = import_aof(aof, tmp_path / "data", 2)
    assert first.commands == 2
    again = import_aof(aof, tmp_path / "data", 2)
    assert again.commands == 0 and again.records == 0
    assert [len(shard) for shard in records(tmp_path / "data")] == [1, 1]  # markers unseen


def test_import_runs_swapdb_on_every_shard_and_store_commands_across_shards(
    tmp_path: Path,
) -> None:
    """SWAPDB reaches every shard; a *STORE whose keys live in several shards, and a SORT
    that reads BY/GET keys, run once over all of them (each shard logs its keys' new
    values)."""
    appendonlydir = tmp_path / "appendonlydir"
    appendonlydir.mkdir()
    (appendonlydir / "appendonly.aof.manifest").write_text(
        "file appendonly.aof.1.incr.aof seq 1 type i\n"
    )
    keys = [b"k%d" % i for i in range(12)]
    commands = [resp(b"SADD", key, b"m", key) for key in keys]
    commands += [resp(b"SADD", b"none", b"x"), resp(b"SUNIONSTORE", b"all", *keys)]
    commands += [resp(b"SINTERSTORE", b"none", *keys, b"missing")]  # empty: deleted
    commands += [resp(b"ZUNIONSTORE", b"z", b"3", *keys[:3], b"WEIGHTS", b"1", b"2", b"3")]
    commands += [
        resp(b"RPUSH", b"srt", b"a", b"b", b"c"),
        resp(b"MSET", b"w_a", b"3", b"w_b", b"1"),
    ]
    commands += [
        resp(b"SET", b"w_c", b"2"),
        resp(b"SORT", b"srt", b"BY", b"w_*", b"GET", b"w_*", b"GET", b"#", b"STORE", b"sorted"),
    ]
    commands += [resp(b"SELECT", b"0"), resp(b"SWAPDB", b"0", b"3")]
    (appendonlydir / "appendonly.aof.1.incr.aof").write_bytes(b"".join(commands))
    import_aof(appendonlydir, tmp_path / "data", 3)
    found = {}
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        with shard_writer(Path(shard_dir)) as writer:
            found.update({(db, key): entry.value for db, key, entry in writer.keyspace.items()})
    assert {db for db, _ in found} == {3}
    assert found[(3, b"all")] == {b"m", *keys}
    assert (3, b"none") not in found
    assert list(found[(3, b"sorted")]) == [b"1", b"b", b"2", b"c", b"3", b"a"]  # BY/GET: any shard
    assert found[(3, b"z")].scores == {b"m": 6.0, b"k0": 1.0, b"k1": 2.0, b"k2": 3.0}
