"""moonish benchmarks (``make bench``). Prints a markdown report; docs/benchmarks.md quotes it.

Each item is ``python -m bench.run <name>`` and carries the number of its section in
docs/benchmarks.md:

1. read: read + decode + encode over a WAL of >= 1M records made by importing the real Redis
   AOF fixture repeatedly into one shard, against a bare loop that only reads the file, checks
   each frame's CRC and calls ``orjson.dumps`` once per record, and against the same records
   in WAL format version 1 (a converted copy). Rounds alternate them; the report gives
   medians and the median of the per-round ratios.
2. position: ``read`` of 10 records at the end of a 10 MB and of a 1 GB WAL (in process, and
   the whole ``moonish cdc read`` command), beside a full scan of each WAL (what a reader that
   rescans the log per poll, like Moon's CDC.READ, pays).
3. writer: records/s for single appends and batches of 10 under each fsync policy.
4. follow: latency from append (commit time) in a writer process to the envelope read from
   ``moonish cdc tail --follow`` in another process: p50 and p99.
5. views: the keyspace write path per stream view type; images: what "read" measures, over
   >= 1M kv_change records with NEW_AND_OLD_IMAGES (bench.state).
6. spark: events/s of the WAL data source and of the envelope files on local[2] (bench.spark);
   delta: one micro-batch's MERGE of 1,000 changes into Delta tables of 10,000 and 1,000,000
   keys (bench.delta); spark-url: the data source over a server's URL against the same source
   over the directory (bench.spark_url).
7. merged: one stream over 4 shards against reading them one by one (bench.merged);
   retention: plan and prune over a 1 GB log; consumers: ``consumer list`` of 1,000 consumers
   (bench.retention).
8. kafka: events/s into a broker, per delivery mode, payload-only and --schemas (bench.kafka).
9. serve: the change feed server over loopback: catch-up against in-process reading, 100
   live subscribers at 10K appends/s, a slow subscriber, 1,000 idle long-polls (bench.serve).
10. import: ``moonish wal import-aof`` of a large AOF written by redis-server
    (NEW_AND_OLD_IMAGES, --shards 1 and 4) against redis-server's own load time of the same
    file (bench.importer); import-rdb: ``wal import-rdb`` of a dump with --processes 1 and 2
    beside redis-server's load of it (bench.rdb_import).
11. capture: live capture of a Redis written at 50,000 commands/s: lag p50/p99
    (bench.capture); capture-cores: a capture catching up a backlog with --processes 1 and 2,
    the speed-up on this machine's cores (bench.capture_cores).
12. tail: ``moonish cdc tail`` of the AOF redis-benchmark makes a redis-server write, one shard,
    against a naive pure-Python reader side by side; in process; merged over 4 shards against
    the shards one by one; poll: one ``cdc read --limit 10`` against starting Python with
    click, orjson and crc32c; tail-memory: peak RSS of ``cdc tail`` over a shard of more than
    1 GiB; follow-memory: RSS of ``cdc tail --follow`` over minutes of appends (bench.tail).
13. families: one write command's cost per command family at 1,000 and 1,000,000 elements;
    import-benchmark: ``wal import-aof`` of the AOF of redis-benchmark's default run against
    redis-server's load of it (bench.families); snapshots: the writer's pause when it starts a
    snapshot in the background, and command latency while the child writes (bench.snapshots);
    restart: a capture's restart to PSYNC after 20,000 and 2,000,000 commands (bench.restart).
14. cluster: a 3-master cluster's capture under redis-benchmark --cluster, and a failover;
    cluster-catchup: how fast one process and two read the cluster's backlog (bench.cluster).

The benchmark process pins itself to one core (spark, spark-url, capture-cores, import-rdb,
cluster-catchup and the --processes 2 workers of import use both). Data goes to bench-data/
(reused across runs).
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import crc32c
import orjson

from bench.capture import bench_capture
from bench.capture_cores import bench_capture_cores
from bench.cluster import bench_cluster, bench_cluster_catchup
from bench.delta import bench_delta
from bench.families import bench_families, bench_import_benchmark_aof
from bench.importer import bench_import
from bench.kafka import bench_kafka
from bench.merged import bench_merged
from bench.paths import AOF, DATA, MOONISH, READ_RECORDS
from bench.rdb_import import bench_import_rdb
from bench.restart import bench_restart
from bench.retention import bench_consumer_list, bench_prune
from bench.serve import bench_serve
from bench.snapshots import bench_snapshots
from bench.spark import bench_spark
from bench.spark_url import bench_spark_url
from bench.state import aof_commands, bench_views, images_wal
from bench.tail import bench_follow_memory, bench_poll, bench_tail, bench_tail_memory
from moonish.cdc import shard_read
from moonish.log.format import (
    FRAME_CRC,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    FRAME_TRAILER_BYTES,
    SEGMENT_HEADER_BYTES,
    V1_BODY_MIN_BYTES,
)
from moonish.log.frames import scan_frames
from moonish.log.reader import ShardReader
from moonish.log.records import KvCommand
from moonish.log.segment import list_segments, segment_path
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.redis.routing.commands import split_command

ROUNDS = 7


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


# -- 1. read throughput ----------------------------------------------------------------------


def read_wal() -> Path:
    """>= 1M plain kv records (command only, no keyspace state): the real AOF's commands
    appended with the raw log API, one record per key, as many times as needed."""
    shard = DATA / "read" / "shard-0"
    if shard.exists() and shard_read.info(shard)["next_lsn"] > READ_RECORDS:
        return shard
    shutil.rmtree(shard.parent, ignore_errors=True)
    commands = aof_commands(AOF)
    with WalWriter(shard, WriterOptions(fsync=FsyncPolicy.NEVER)) as writer:
        while writer.next_lsn <= READ_RECORDS:
            for db, argv in commands:
                parts = [
                    KvCommand(db, part_argv, key_pos)
                    for _, part_argv, key_pos in split_command(argv)
                ]
                if len(parts) == 1:
                    writer.append(parts[0])
                else:
                    writer.append_batch(parts)
    return shard


def moonish_read(shard: Path) -> tuple[int, float]:
    """What ``moonish cdc tail`` does: envelope bytes a batch at a time."""
    started = time.perf_counter()
    count = 0
    with shard_read.tail(shard, 0) as stream:
        for batch in stream.batches():
            count += len(batch.envelopes)
    return count, time.perf_counter() - started


def moonish_events(shard: Path) -> tuple[int, float]:
    """The typed path: one ChangeEvent object per event, iterated one by one."""
    started = time.perf_counter()
    count = 0
    with shard_read.tail(shard, 0) as stream:
        for event in stream:
            count += len(event.envelope) > 0
    return count, time.perf_counter() - started


def bare_loop(shard: Path) -> tuple[int, float]:
    """Read each segment in 1 MiB chunks, check every frame's CRC (format version 2: the
    trailer over header and payload), orjson.dumps once each."""
    started = time.perf_counter()
    count = 0
    dumps, crc_of, u32 = orjson.dumps, crc32c.crc32c, FRAME_CRC.unpack_from
    overhead = FRAME_HEADER_BYTES + FRAME_TRAILER_BYTES
    for base in list_segments(str(shard)):
        with open(segment_path(str(shard), base), "rb") as handle:
            buf = handle.read(1 << 20)[SEGMENT_HEADER_BYTES:]
            while buf:
                view, pos, end = memoryview(buf), 0, len(buf)
                while end - pos >= 8:
                    (length,) = u32(buf, pos + 4)
                    frame_end = pos + overhead + length
                    if frame_end > end:
                        break
                    if crc_of(view[pos : frame_end - 4]) != u32(buf, frame_end - 4)[0]:
                        raise SystemExit("bad CRC in the benchmark WAL")
                    dumps({"offset": pos, "bytes": length})
                    pos = frame_end
                    count += 1
                more = handle.read(1 << 20)
                buf = buf[pos:] + more if more else b""
    return count, time.perf_counter() - started


def bench_read() -> list[str]:
    return compare_with_bare_loop(read_wal(), "plain kv records (the AOF's commands, no state)")


def bench_images() -> list[str]:
    shard = images_wal(DATA, AOF, READ_RECORDS)
    return compare_with_bare_loop(shard, "kv_change records, NEW_AND_OLD_IMAGES")


def v1_copy(shard: Path) -> Path:
    """The same records in WAL format version 1 (one CRC per frame, no header checksum, no
    trailer), beside ``shard``, to measure in one run what version 2 costs a reader. Segments
    only: the read benchmark reads from LSN 1."""
    out = shard.parent / f"{shard.name}-v1"
    stamp = out / "SOURCE"
    source = f"{shard_read.info(shard)['next_lsn']}"
    if stamp.exists() and stamp.read_text() == source:
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for base in list_segments(str(shard)):
        data = Path(segment_path(str(shard), base)).read_bytes()
        head = bytearray(data[:SEGMENT_HEADER_BYTES])
        struct.pack_into("<H", head, 8, 1)
        struct.pack_into("<I", head, 36, crc32c.crc32c(bytes(head[:36])))
        parts = [bytes(head)]
        frames, _, stop = scan_frames(data, SEGMENT_HEADER_BYTES, base, len(data))
        assert stop is None
        for f in frames:
            body = (
                FRAME_HEADER.pack(
                    0,
                    V1_BODY_MIN_BYTES + len(f.payload),
                    f.lsn,
                    f.record_type,
                    f.flags,
                    0,
                    f.batch_index,
                    f.batch_size,
                    f.commit_us,
                )[4:]
                + f.payload
            )
            parts.append(FRAME_CRC.pack(crc32c.crc32c(body)) + body)
        Path(segment_path(str(out), base)).write_bytes(b"".join(parts))
    stamp.write_text(source)
    return out


def compare_with_bare_loop(shard: Path, what: str) -> list[str]:
    ours, typed, bare, ratios, v1, v1_ratios = [], [], [], [], [], []
    old = v1_copy(shard)
    moonish_read(shard)  # warm-up round, not timed: allocator arenas, page cache
    moonish_read(old)
    bare_loop(shard)
    for _ in range(ROUNDS):
        count, seconds = moonish_read(shard)
        event_count, event_seconds = moonish_events(shard)
        old_count, old_seconds = moonish_read(old)
        bare_count, bare_seconds = bare_loop(shard)
        assert bare_count == count == event_count == old_count
        ours.append(count / seconds)
        typed.append(count / event_seconds)
        bare.append(count / bare_seconds)
        v1.append(count / old_seconds)
        ratios.append((count / seconds) / (count / bare_seconds))
        v1_ratios.append(old_seconds / seconds)
    return [
        f"records: {count:,} {what}, {shard_read.info(shard)['bytes'] / 2**20:,.0f} MiB",
        f"moonish read + decode + encode (envelope batches, as `cdc tail`): median "
        f"{statistics.median(ours):,.0f} events/s "
        f"(rounds: {', '.join(f'{x:,.0f}' for x in ours)})",
        f"moonish, iterating one ChangeEvent object per event: median "
        f"{statistics.median(typed):,.0f} events/s",
        f"bare loop (read, CRC, orjson.dumps): median {statistics.median(bare):,.0f} records/s",
        f"ratio moonish / bare loop: median {statistics.median(ratios):.2f}",
        f"the same records in WAL format version 1 (a converted copy): median "
        f"{statistics.median(v1):,.0f} events/s; ratio version 2 / version 1 (same round): "
        f"median {statistics.median(v1_ratios):.2f}",
    ]


# -- 2. positioning ---------------------------------------------------------------------------


def sized_wal(name: str, size_bytes: int) -> Path:
    shard = DATA / name / "shard-0"
    if shard.exists() and shard_read.info(shard)["bytes"] >= size_bytes:
        return shard
    shutil.rmtree(shard.parent, ignore_errors=True)
    value = b"v" * 200
    with WalWriter(shard, WriterOptions(fsync=FsyncPolicy.NEVER)) as writer:
        written, i = 0, 0
        while written < size_bytes:
            batch = [KvCommand(0, (b"SET", b"key:%012d" % (i + j), value)) for j in range(1000)]
            writer.append_batch(batch)
            i += 1000
            written += 1000 * 260
    return shard


def bench_position() -> list[str]:
    lines = []
    results = {}
    for name, size in (("10MB", 10 * 1024 * 1024), ("1GB", 1024 * 1024 * 1024)):
        shard = sized_wal(f"position-{name}", size)
        facts = shard_read.info(shard)
        start = facts["latest_lsn"] - 9

        def in_process(shard: Path = shard, start: int = start) -> float:
            began = time.perf_counter()
            assert len(shard_read.read(shard, start, 10).events) == 10
            return time.perf_counter() - began

        def command(shard: Path = shard, start: int = start) -> float:
            began = time.perf_counter()
            subprocess.run(
                [*MOONISH, "cdc", "read", str(shard), str(start), "--limit", "10"],
                check=True,
                capture_output=True,
            )
            return time.perf_counter() - began

        def full_scan(shard: Path = shard) -> float:
            began = time.perf_counter()
            reader = ShardReader(shard)
            reader.seek(1)
            while reader.poll(65536):
                pass
            reader.close()
            return time.perf_counter() - began

        results[name] = (median_of(50, in_process), median_of(10, command))
        scan = median_of(3, full_scan)
        lines.append(
            f"{name} WAL ({facts['bytes'] / 2**20:,.0f} MiB, {facts['segments']} segments, "
            f"{facts['latest_lsn']:,} records): read of the last 10 in process median "
            f"{results[name][0] * 1000:.2f} ms, `moonish cdc read` median "
            f"{results[name][1] * 1000:.0f} ms; a full scan takes {scan * 1000:,.0f} ms"
        )
    small, large = results["10MB"], results["1GB"]
    lines.append(
        f"ratio 1 GB / 10 MB: in process {large[0] / small[0]:.2f}, "
        f"command {large[1] / small[1]:.2f}"
    )
    return lines


# -- 3. writer --------------------------------------------------------------------------------


def bench_writer() -> list[str]:
    lines = []
    for policy in FsyncPolicy:
        singles = 2_000 if policy is FsyncPolicy.ALWAYS else 200_000
        for batch_size in (1, 10):
            path = DATA / "writer" / f"{policy.value}-{batch_size}"
            shutil.rmtree(path, ignore_errors=True)
            records = [KvCommand(0, (b"SET", b"key:%012d" % i, b"v" * 100)) for i in range(10)]
            writer = WalWriter(path, WriterOptions(fsync=policy))
            began = time.perf_counter()
            if batch_size == 1:
                for i in range(singles):
                    writer.append(records[i % 10])
            else:
                for _ in range(singles // 10):
                    writer.append_batch(records)
            writer.close()
            seconds = time.perf_counter() - began
            kind = "single appends" if batch_size == 1 else "batches of 10"
            lines.append(
                f"fsync {policy.value}, {kind}: {singles / seconds:,.0f} records/s "
                f"({singles:,} records, close included)"
            )
            shutil.rmtree(path)
    return lines


# -- 4. follow latency ------------------------------------------------------------------------

FOLLOW_WRITER = """
import sys, time
from moonish.log.records import KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
with WalWriter(sys.argv[1], WriterOptions(fsync=FsyncPolicy.NEVER)) as writer:
    for i in range(int(sys.argv[2])):
        writer.append(KvCommand(0, (b"SET", b"key:%d" % i, b"value")))
        time.sleep(0.002)
"""


def bench_follow(samples: int = 2000) -> list[str]:
    shard = DATA / "follow" / "shard-0"
    shutil.rmtree(shard.parent, ignore_errors=True)
    WalWriter(shard, WriterOptions(fsync=FsyncPolicy.NEVER)).close()  # a shard to follow
    follower = subprocess.Popen(
        [*MOONISH, "cdc", "tail", str(shard), "--follow"], stdout=subprocess.PIPE
    )
    latencies_ms = []
    with follower:
        time.sleep(1.0)
        writer = subprocess.Popen([sys.executable, "-c", FOLLOW_WRITER, str(shard), str(samples)])
        assert follower.stdout is not None
        for _ in range(samples):
            line = follower.stdout.readline()
            received_us = time.time_ns() // 1000
            latencies_ms.append((received_us - orjson.loads(line)["source"]["ts_us"]) / 1000)
        writer.wait()
        follower.terminate()
    latencies_ms.sort()
    p50 = latencies_ms[len(latencies_ms) // 2]
    p99 = latencies_ms[int(len(latencies_ms) * 0.99)]
    return [
        f"{samples} appends 2 ms apart, writer and `moonish cdc tail --follow` in separate "
        f"processes: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {latencies_ms[-1]:.2f} ms"
    ]


def interpreter() -> str:
    """The interpreter's executable, and whether libpython is linked into it (Debian's
    python3.11, built with LTO and PGO) or loaded as a shared library (pyenv's default build):
    the speed figures depend on it (docs/build.md, "Which Python")."""
    with open("/proc/self/maps") as maps:
        shared = any("libpython" in line for line in maps)
    linked = "libpython loaded as a shared library" if shared else "libpython linked in"
    return f"{getattr(sys, '_base_executable', sys.executable)}, {linked}"


def main() -> None:
    os.sched_setaffinity(0, {0})
    DATA.mkdir(exist_ok=True)
    print(f"# moonish benchmarks, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()} ({interpreter()}), "
        "benchmark process pinned to one core"
    )
    sections = [
        ("read", bench_read),
        ("images", bench_images),
        ("position", bench_position),
        ("writer", bench_writer),
        ("views", lambda: bench_views(DATA, AOF)),
        ("follow", bench_follow),
        ("spark", lambda: bench_spark(DATA, images_wal(DATA, AOF, READ_RECORDS))),
        ("delta", lambda: bench_delta(DATA)),
        ("spark-url", lambda: bench_spark_url(DATA, images_wal(DATA, AOF, READ_RECORDS))),
        ("merged", lambda: bench_merged(DATA, AOF, READ_RECORDS)),
        ("retention", lambda: bench_prune(DATA)),
        ("consumers", lambda: bench_consumer_list(DATA)),
        ("kafka", lambda: bench_kafka(DATA, AOF)),
        ("serve", lambda: bench_serve(DATA, AOF, READ_RECORDS)),
        ("import", lambda: bench_import(DATA)),
        ("capture", lambda: bench_capture(DATA)),
        ("capture-cores", lambda: bench_capture_cores(DATA)),
        ("cluster", lambda: bench_cluster(DATA)),
        ("cluster-catchup", lambda: bench_cluster_catchup(DATA)),
        ("import-rdb", lambda: bench_import_rdb(DATA)),
        ("tail", lambda: bench_tail(DATA)),
        ("poll", lambda: bench_poll(DATA)),
        ("tail-memory", lambda: bench_tail_memory(DATA)),
        ("follow-memory", lambda: bench_follow_memory(DATA)),
        ("families", lambda: bench_families(DATA)),
        ("import-benchmark", lambda: bench_import_benchmark_aof(DATA)),
        ("snapshots", lambda: bench_snapshots(DATA)),
        ("restart", lambda: bench_restart(DATA)),
    ]
    only = sys.argv[1:]
    for title, bench in sections:
        if only and title not in only:
            continue
        print(f"\n## {title}")
        for line in bench():
            print(f"- {line}", flush=True)


if __name__ == "__main__":
    main()
