"""Benchmark of ``moonish cdc kafka`` (``make bench``, ``python -m bench.run kafka``).

Events/s from a shard of 200,000 kv_change records with NEW_AND_OLD_IMAGES (the real AOF's
commands, bench.state) into a Tansu broker on 127.0.0.1 (tests/kafka_broker.py; a fresh one
per run, it keeps everything in memory), for each delivery mode, payload-only and
``--schemas``. The sink runs in the benchmark process, pinned to one core with its librdkafka
threads; the broker runs beside it. Also: the size of a record's value in each form.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from moonish.cdc.shard_read import Tail
from moonish.sinks.kafka import AT_LEAST_ONCE, EXACTLY_ONCE, KafkaOptions, KafkaSink
from moonish.sinks.kafka_schema import SchemaForm

RECORDS = 200_000
ROUNDS = 3


def bench_kafka(data: Path, appendonlydir: Path) -> list[str]:
    from bench.state import images_wal
    from tests.kafka_broker import tansu

    shard = images_wal(data, appendonlydir, RECORDS, name="kafka")
    lines = [f"{RECORDS:,} kv_change records (NEW_AND_OLD_IMAGES), {ROUNDS} rounds, median"]
    for delivery in (AT_LEAST_ONCE, EXACTLY_ONCE):
        for schemas in (False, True):
            rates = []
            for round_ in range(ROUNDS):
                with tansu() as broker:
                    options = KafkaOptions(broker.bootstrap, topic_prefix=f"b{round_}",
                                           delivery=delivery, schemas=schemas)  # fmt: skip
                    with KafkaSink(shard.parent, options) as sink:
                        started = time.perf_counter()
                        stats = sink.run()
                        rates.append(stats.events / (time.perf_counter() - started))
            form = "--schemas" if schemas else "payload-only"
            lines.append(
                f"{delivery}, {form}: {statistics.median(rates):,.0f} events/s "
                f"(rounds {min(rates):,.0f}..{max(rates):,.0f})"
            )
    plain, wrapped = _sizes(shard)
    lines.append(
        f"value bytes per change: payload-only {plain:,.0f}, --schemas {wrapped:,.0f} "
        f"({wrapped / plain:.1f}x)"
    )
    return lines


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
