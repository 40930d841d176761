"""Benchmark of ``moonish cdc kafka`` (``make bench``, ``python -m bench.run kafka``).

Events/s from a shard of 200,000 kv_change records with NEW_AND_OLD_IMAGES (the real AOF's
commands, bench.state) into a Tansu broker on 127.0.0.1
(tests/support/servers/kafka_broker.py; a fresh one per run, it keeps everything in memory), for
each delivery mode, payload-only and ``--schemas``. The sink runs in the benchmark process,
pinned to one core with its librdkafka threads; the broker runs beside it. Also: the size of a
record's value in each form.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from bench.cores import elsewhere
from moonish.cdc.shard_read import Tail
from moonish.sinks.kafka.schema import SchemaForm
from moonish.sinks.kafka.sink import AT_LEAST_ONCE, EXACTLY_ONCE, KafkaOptions, KafkaSink
from tests.support.servers.kafka_broker import Broker

RECORDS = 200_000
ROUNDS = 5


def bench_kafka(data: Path, appendonlydir: Path) -> list[str]:
    from bench.state import images_wal

    shard = images_wal(data, appendonlydir, RECORDS, name="kafka")
    lines = [f"{RECORDS:,} kv_change records (NEW_AND_OLD_IMAGES), {ROUNDS} rounds, median"]
    reads: list[float] = []
    for delivery in (AT_LEAST_ONCE, EXACTLY_ONCE):
        for schemas in (False, True):
            rates: list[float] = []
            ratios: list[float] = []
            with_start: list[float] = []
            starts: list[float] = []
            for round_ in range(ROUNDS):
                reads.append(_read_rate(shard))
                with _beside() as broker:
                    options = KafkaOptions(
                        broker.bootstrap,
                        topic_prefix=f"b{round_}",
                        delivery=delivery,
                        schemas=schemas,
                    )
                    with KafkaSink(shard.parent, options) as sink:
                        started = time.perf_counter()
                        sink.start()
                        running = time.perf_counter()
                        stats = sink.run()
                        ended = time.perf_counter()
                        rates.append(stats.events / (ended - running))
                        with_start.append(stats.events / (ended - started))
                        starts.append((running - started) * 1000)
                        ratios.append(rates[-1] / reads[-1])
            form = "--schemas" if schemas else "payload-only"
            lines.append(
                f"{delivery}, {form}: {statistics.median(rates):,.0f} events/s "
                f"(rounds {min(rates):,.0f}..{max(rates):,.0f}); with the start "
                f"({statistics.median(starts):,.0f} ms) {statistics.median(with_start):,.0f}/s; "
                f"per round / reading alone: {statistics.median(ratios):.2f}"
            )
    lines.append(
        f"reference, the same records read as envelopes (the sink's read path, no broker), "
        f"measured before every round: {statistics.median(reads):,.0f} events/s "
        f"(rounds {min(reads):,.0f}..{max(reads):,.0f})"
    )
    plain, wrapped = _sizes(shard)
    lines.append(
        f"value bytes per change: payload-only {plain:,.0f}, --schemas {wrapped:,.0f} "
        f"({wrapped / plain:.1f}x)"
    )
    return lines


def _read_rate(shard: Path) -> float:
    """Events/s of reading the shard as envelope batches, as the sink reads it."""
    started, count = time.perf_counter(), 0
    with Tail(shard, transactions=True) as tail:
        for batch in tail.batches():
            count += len(batch.envelopes)
    return count / (time.perf_counter() - started)


@contextlib.contextmanager
def _beside() -> Iterator[Broker]:
    """A Tansu broker on the cores the benchmark is not pinned to."""
    from tests.support.servers.kafka_broker import tansu

    with contextlib.ExitStack() as stack:
        with elsewhere():
            broker = stack.enter_context(tansu())
        yield broker


def _sizes(shard: Path) -> tuple[float, float]:
    """Mean value size of the first 10,000 changes, payload-only and with schemas."""
    form, plain, wrapped, count = SchemaForm(), 0, 0, 0
    with Tail(shard) as events:
        for event in events:
            plain += len(event.envelope)
            wrapped += len(form.change_value("moonish.db0", event.envelope))
            count += 1
            if count == 10_000:
                break
    return plain / count, wrapped / count
