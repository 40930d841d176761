"""Named consumers seen against the log: the lag table of ``moonish consumer list`` (in the
spirit of ``kafka-consumer-groups --describe`` and PostgreSQL's ``pg_replication_slots``).
Reading from a consumer is moonish.cdc.merged_read (``moonish.read(data_dir, consumer=...)``).

Lag counts changes only: the records readers deliver as change events, not position markers
(kv_change records written with the stream off), checkpoints or messages (``op: "m"``;
moonish.cdc.envelope ``is_change``). A consumer that confirmed every change stands at lag 0,
however many such records follow it. Per consumer and shard (``ShardLag``):

- ``confirmed_lsn``: the last LSN it confirmed; ``latest_lsn``: the shard's last LSN;
- ``lag_records``: changes after its position up to the latest, counted in the first
  :data:`COUNT_RECORDS` records after it; past those every LSN counts (an upper bound), as
  does every LSN no longer retained (less any a repair discarded);
- ``lag_bytes``: segment bytes from the frame of its next change to the end of the log (0
  when there is none);
- ``oldest_unconfirmed_age_ms``: now minus the commit time of its next change (``None`` when
  there is none; for a consumer whose changes are gone, the oldest retained);
- ``status``: ``reserved`` (the policy keeps its changes anyway), ``extended`` (it is what
  holds segments the policy would remove), ``lost`` (marked so, with the reason, or its next
  change is no longer retained).

Reading cost: per shard one end-of-log scan, one retention plan without consumers, and per
distinct position (cached) one seek and a read of up to :data:`COUNT_RECORDS` records (to the
end of the log for a consumer close to it), whatever the number of consumers.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from dataclasses import dataclass

from moonish.cdc.envelope import is_change
from moonish.cdc.positions import data_shards, latest_lsn
from moonish.cdc.token import Token
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.datadir import consumers
from moonish.datadir.consumers import Consumer
from moonish.datadir.layout import oldest_lsn
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import plan
from moonish.errors import InvalidArgumentError, LsnDiscardedError
from moonish.log.control import load_control
from moonish.log.reader import ShardReader
from moonish.log.segment import list_segments, segment_path
from moonish.state.config import load_config

RESERVED, EXTENDED, LOST = "reserved", "extended", "lost"
COUNT_RECORDS = 100_000
"""Changes are counted in this many records after a position; past them every LSN counts."""
POLL_RECORDS = 4096


@dataclass(frozen=True, slots=True)
class ShardLag:
    """One consumer in one shard (see the module docstring for the fields)."""

    shard: int
    confirmed_lsn: int
    latest_lsn: int
    lag_records: int
    lag_bytes: int
    oldest_unconfirmed_age_ms: int | None
    status: str
    reason: str | None

    def to_json(self) -> dict[str, object]:
        return {
            "shard": self.shard,
            "confirmed_lsn": self.confirmed_lsn,
            "latest_lsn": self.latest_lsn,
            "lag_records": self.lag_records,
            "lag_bytes": self.lag_bytes,
            "oldest_unconfirmed_age_ms": self.oldest_unconfirmed_age_ms,
            "status": self.status,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    """A consumer, its position as a token, and its lag in every shard (shard 0 first)."""

    consumer: Consumer
    token: str
    shards: tuple[ShardLag, ...]

    def to_json(self) -> dict[str, object]:
        c = self.consumer
        return {
            "name": c.name,
            "owner": c.owner,
            "token": self.token,
            "status": c.status,
            "lost_reason": c.lost_reason,
            "lost_ms": c.lost_ms,
            "created_ms": c.created_ms,
            "updated_ms": c.updated_ms,
            "lag_records": sum(shard.lag_records for shard in self.shards),
            "lag_bytes": sum(shard.lag_bytes for shard in self.shards),
            "shards": [shard.to_json() for shard in self.shards],
        }


class _Shard:
    """What the table needs of one shard, read once."""

    def __init__(self, shard_dir: str, number: int, now_ms: int) -> None:
        self.shard_dir, self.number, self.now_ms = shard_dir, number, now_ms
        self.latest = latest_lsn(shard_dir)
        self.bases = list_segments(shard_dir)
        self.sizes = [os.path.getsize(segment_path(shard_dir, base)) for base in self.bases]
        self.after = [sum(self.sizes[i + 1 :]) for i in range(len(self.sizes))]
        self.oldest = oldest_lsn(shard_dir)
        control = load_control(shard_dir)
        self.discarded = control.discarded if control is not None else ()
        config = load_config(shard_dir)
        policy = config.retention if config is not None else RetentionPolicy()
        self.reserved_from = plan(
            shard_dir, policy, now_ms=now_ms, with_consumers=False
        ).reserved_from
        self._reader = ShardReader(shard_dir)
        self._seen: dict[int, tuple[int, int | None, int]] = {}

    def close(self) -> None:
        self._reader.close()

    def measured(self, consumer: Consumer) -> int:
        """The position whose next records give the consumer's lag: its own, or before the
        oldest retained record when its next ones are gone."""
        position = consumer.positions[self.number]
        return self.oldest - 1 if position + 1 < self.oldest else position

    def lag(self, consumer: Consumer) -> ShardLag:
        position = consumer.positions[self.number]
        measured = self.measured(consumer)
        size, age, changes = self._after(measured)
        gone = max(0, min(measured, self.latest) - position)  # LSNs no longer retained
        records = changes + gone - self._discarded_between(position, position + gone)
        if consumer.lost:
            status, reason = LOST, consumer.lost_reason
        elif position < self.latest and position + 1 < self.oldest:
            status = LOST
            reason = f"LSNs {position + 1}..{self.oldest - 1} are no longer retained"
        else:
            status, reason = (RESERVED if position + 1 >= self.reserved_from else EXTENDED), None
        return ShardLag(self.number, position, self.latest, records, size, age, status, reason)

    def _discarded_between(self, position: int, last: int) -> int:
        """LSNs in ``(position, last]`` that a repair discarded."""
        return sum(
            max(0, min(end, last) - max(first, position + 1) + 1) for first, end in self.discarded
        )

    def _after(self, position: int) -> tuple[int, int | None, int]:
        """(bytes from the frame of the next change after ``position`` to the end of the log,
        its age in ms, changes after ``position``), cached per position."""
        if position >= self.latest or not self.bases:
            return 0, None, 0
        if position not in self._seen:
            self._seen[position] = self._measure(position)
        return self._seen[position]

    def _measure(self, position: int) -> tuple[int, int | None, int]:
        reader = self._reader
        try:
            reader.seek(position + 1)
        except LsnDiscardedError as error:
            if error.oldest_lsn > self.latest:
                return 0, None, 0
            reader.seek(error.oldest_lsn)
        first = None
        changes = read = 0
        counted = position  # changes are counted up to here, each LSN after it
        while read < COUNT_RECORDS or first is None:  # (past them, only the next change)
            frames = reader.poll(POLL_RECORDS)
            for frame in frames:
                if frame.lsn > self.latest:  # (written since the table began)
                    frames = []
                    break
                change = is_change(frame.record_type, frame.payload)
                if change and first is None:
                    first = frame
                if read < COUNT_RECORDS:
                    changes += change
                    counted = frame.lsn
                read += 1
            if not frames:
                break
        if counted < self.latest:
            changes += self.latest - counted - self._discarded_between(counted, self.latest)
        if first is None:
            return 0, None, changes
        i = bisect.bisect_right(self.bases, first.lsn) - 1
        size = self.sizes[i] - first.offset + self.after[i]
        return max(size, 0), max(0, self.now_ms - first.commit_us // 1000), changes


def lag_table(
    data_dir: str | os.PathLike[str],
    *,
    names: Sequence[str] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> list[ConsumerLag]:
    """The lag of every consumer of ``data_dir`` (or of ``names``, in that order), by name.

    Args:
        data_dir: a data directory or a shard directory (a data directory of one shard).
        names: only these consumers.
        clock: ages are measured against its time.

    Raises:
        ConsumerNotFoundError: a name in ``names`` is not registered.
        InvalidArgumentError: not a data directory; a consumer of another shard count.
        CorruptionError: a damaged consumer file, or damage where the log is read.
    """
    root = os.fspath(data_dir)
    shard_dirs = data_shards(root)
    found = (
        consumers.list_consumers(root)
        if names is None
        else [consumers.load(root, name) for name in names]
    )
    now_ms = clock.now_us() // 1000
    shards = [_Shard(path, k, now_ms) for k, path in enumerate(shard_dirs)]
    try:
        table = []
        for consumer in found:
            if consumer.shards != len(shards):
                raise InvalidArgumentError(
                    f"consumer {consumer.name!r} has {consumer.shards} shard positions; the "
                    f"data directory has {len(shards)} shards",
                    path=root,
                )
            lags = tuple(shard.lag(consumer) for shard in shards)
            table.append(ConsumerLag(consumer, str(Token(consumer.positions)), lags))
        return table
    finally:
        for shard in shards:
            shard.close()


def describe(
    data_dir: str | os.PathLike[str], name: str, *, clock: Clock = SYSTEM_CLOCK
) -> ConsumerLag:
    """The lag of consumer ``name`` (``moonish consumer show``).

    Raises:
        ConsumerNotFoundError: no such consumer; otherwise as :func:`lag_table`.
    """
    return lag_table(data_dir, names=[name], clock=clock)[0]
