"""Child processes of tests/log/test_killed_writers.py: a writer that appends until it is killed
(or tears its own tail and kills itself), and two followers that tail the shard the whole time.

Run from the project root::

    python -m tests.support.crash_procs writer SHARD SEED GENERATION LOG MODE
    python -m tests.support.crash_procs frames SHARD OUT      # ShardReader.poll loop
    python -m tests.support.crash_procs events SHARD OUT      # moonish.tail(follow=True)

The writer's LOG gets one line per event, each written with a single ``write`` (the page cache
keeps it when the process is SIGKILLed)::

    open <next_lsn> <truncated_bytes>        the writer opened the shard
    a <first_lsn> <count> <batch:0|1> <d1>,<d2>,...   an append returned (payload digests)
    torn <lsn> <bytes>                        about to leave a torn frame prefix and die
    zero <lsn> <bytes>                        about to leave a zero-filled tail and die
    closed <next_lsn>                         closed cleanly

Every record is ``SET <key> <value>`` with key ``g<generation>:s<seq>:i<index>`` and a value
derived from the key (:func:`make_value`), so a checker recognises any record on its own. The
records whose frames make up a torn tail carry a ``t`` marker; none may ever be read.

The followers write one line per record they see; on SIGTERM they stop and exit 0. Anything they
raise (a ``CorruptionError``) ends them with a traceback on stderr and exit status 1; SIGUSR1
dumps their stacks to stderr (faulthandler)."""

from __future__ import annotations

import faulthandler
import hashlib
import os
import random
import signal
import sys
import threading
import time

import orjson

import moonish
from moonish.log.format import FLAG_BATCH, RecordType
from moonish.log.frames import encode_frame
from moonish.log.payloads import encode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import KvCommand
from moonish.log.segment import list_segments, segment_path
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions

MODES = ("kill", "torn", "zero", "clean")
KILL_MODE_MAX_APPENDS = 400
"""A writer waiting to be killed stops appending after this many (bounds the log's growth)."""


def digest(payload: bytes) -> str:
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


def make_key(generation: int, seq: int, index: int, torn: bool = False) -> bytes:
    return f"g{generation}:s{seq}:i{index}{':t' if torn else ''}".encode()


def make_value(key: bytes, size: int) -> bytes:
    """``size`` bytes (at least the key's length) that only ``key`` gives."""
    unit = key + b"|" + hashlib.blake2b(key, digest_size=8).hexdigest().encode() + b"|"
    size = max(size, len(unit))
    return (unit * (size // len(unit) + 1))[:size]


def make_record(generation: int, seq: int, index: int, size: int, torn: bool) -> KvCommand:
    key = make_key(generation, seq, index, torn)
    return KvCommand(0, (b"SET", key, make_value(key, size)))


def parse_key(key: bytes) -> tuple[int, int, int, bool]:
    """``(generation, seq, index, torn)`` of a key made by :func:`make_key`."""
    parts = key.decode().split(":")
    return int(parts[0][1:]), int(parts[1][1:]), int(parts[2][1:]), parts[3:] == ["t"]


def _value_size(rng: random.Random) -> int:
    return rng.randint(3000, 9000) if rng.random() < 0.08 else rng.randint(8, 240)


def _plan(rng: random.Random, generation: int, seq: int, torn: bool) -> list[KvCommand]:
    """The records of one append: one record, or an atomic batch of 2..6."""
    count = 1 if rng.random() < 0.6 else rng.randint(2, 6)
    return [make_record(generation, seq, i, _value_size(rng), torn) for i in range(count)]


class _Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def line(self, text: str) -> None:
        os.write(self.fd, (text + "\n").encode())


def _append_raw(shard: str, data: bytes) -> None:
    """Write ``data`` at the end of the newest segment, the way an interrupted append does."""
    path = segment_path(shard, list_segments(shard)[-1])
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _torn_bytes(rng: random.Random, records: list[KvCommand], first_lsn: int) -> bytes:
    """Whole frames of the append, then a prefix of one more (never the whole append)."""
    commit_us = time.time_ns() // 1000
    flags = FLAG_BATCH if len(records) > 1 else 0
    frames = [
        encode_frame(
            first_lsn + i,
            RecordType.KV,
            encode_payload(record)[1],
            commit_us,
            i,
            len(records),
            flags,
        )
        for i, record in enumerate(records)
    ]
    whole = rng.randrange(len(frames))  # frames written completely
    cut = frames[whole]
    keep = rng.randint(0 if whole else 1, len(cut) - 1)
    return b"".join(frames[:whole]) + cut[:keep]


def run_writer(shard: str, seed: int, generation: int, log_path: str, mode: str) -> None:
    rng = random.Random(seed)
    options = WriterOptions(
        segment_bytes=rng.choice((4096, 8192, 16384)),
        fsync=FsyncPolicy.NEVER,
        index_interval_bytes=rng.choice((512, 4096, 65536)),
    )
    log = _Log(log_path)
    writer = WalWriter(shard, options)
    log.line(f"open {writer.next_lsn} {writer.recovery.truncated_bytes}")
    appends = KILL_MODE_MAX_APPENDS if mode == "kill" else rng.randint(0, 60)
    for seq in range(appends):
        records = _plan(rng, generation, seq, False)
        digests = ",".join(digest(encode_payload(record)[1]) for record in records)
        if len(records) == 1 and rng.random() < 0.7:
            first, batch = writer.append(records[0]), 0
        else:
            first, batch = writer.append_batch(records)[0], 1
        log.line(f"a {first} {len(records)} {batch} {digests}")
        if rng.random() < 0.3:
            time.sleep(rng.uniform(0, 0.003))
    if mode == "kill":
        time.sleep(60)  # the test kills us long before
    elif mode == "clean":
        writer.close()
        log.line(f"closed {writer.next_lsn}")
        return
    lsn = writer.next_lsn
    if mode == "torn":
        data = _torn_bytes(rng, _plan(rng, generation, appends, True), lsn)
    else:
        data = bytes(rng.randint(1, 9000))
    log.line(f"{mode} {lsn} {len(data)}")
    _append_raw(shard, data)
    os.kill(os.getpid(), signal.SIGKILL)


class _Stop:
    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True


def run_frames_follower(shard: str, out_path: str) -> None:
    """Poll a ShardReader from LSN 1: ``<lsn> <batch_index> <batch_size> <flags> <digest>``."""
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with ShardReader(shard) as reader:
        reader.seek(1)
        while not stop.requested:
            frames = reader.poll(512)
            if not frames:
                time.sleep(0.005)
                continue
            os.write(
                out,
                "".join(
                    f"{f.lsn} {f.batch_index} {f.batch_size} {f.flags} {digest(f.payload)}\n"
                    for f in frames
                ).encode(),
            )
    os.close(out)


def run_events_follower(shard: str, out_path: str) -> None:
    """Iterate ``moonish.tail(follow=True)``: ``<lsn> <op> <digest of the payload>``."""
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with moonish.tail(shard, 0, follow=True, fallback_poll_ms=50) as stream:

        def stop(signum: int, frame: object) -> None:  # close() must not run under poll's lock
            threading.Thread(target=stream.close, daemon=True).start()

        signal.signal(signal.SIGTERM, stop)
        for event in stream:
            source = orjson.loads(event.envelope)["source"]
            if source["lsn"] != event.lsn:
                raise AssertionError(f"envelope of LSN {event.lsn} says {source['lsn']}")
            os.write(out, f"{event.lsn} {event.op} {digest(event.payload)}\n".encode())
    os.close(out)


def main(argv: list[str]) -> None:
    role, shard = argv[0], argv[1]
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks a stalled follower
    if role == "writer":
        seed, generation, log_path, mode = int(argv[2]), int(argv[3]), argv[4], argv[5]
        if mode not in MODES:
            raise SystemExit(f"unknown mode {mode!r}")
        run_writer(shard, seed, generation, log_path, mode)
    elif role == "frames":
        run_frames_follower(shard, argv[2])
    elif role == "events":
        run_events_follower(shard, argv[2])
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
