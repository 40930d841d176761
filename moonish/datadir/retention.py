"""Retention: which whole sealed segments of a shard may go, and removing them safely.

A policy (:class:`RetentionPolicy`, stored per shard in ``stream.json`` by moonish.state.config)
says what to delete: the oldest sealed segments while the shard holds more than
``max_bytes`` or more than ``max_records`` LSNs, and sealed segments whose newest record is
older than ``max_age_ms`` (Kafka's ``retention.bytes`` and ``retention.ms``; a segment goes when
any rule wants it). Deletion is always a prefix of the log, oldest first, and stops at the
first segment that must stay:

1. the newest segment (the one a writer appends to) never goes;
2. ``min_age_ms``: a segment whose newest record is younger stays (SlateDB's WAL ``min_age``);
3. snapshots: records after the oldest snapshot on disk stay (a ``--snapshot`` reader reads a
   snapshot's rows, then the records after it; a ``ShardWriter`` rebuilds its keyspace the same
   way). A shard with a ``stream.json`` (a keyspace shard) and no snapshot keeps everything:
   its writer could not rebuild the keyspace otherwise. The writer writes a snapshot first
   when this is what holds the policy back (moonish.state.shard);
4. consumers (moonish.datadir.consumers) that are not ``lost`` pin every LSN after their position.
   ``max_pinned_bytes`` caps what they hold beyond the rest of the policy: past it the
   laggiest is marked ``lost`` with a reason and the plan is made again (PostgreSQL's
   ``max_slot_wal_keep_size``), so consumers never fill the disk.

Crash safety: each segment's index goes first, then the segment, then the directory is
fsynced, before the next segment is touched. A crash at any point leaves a prefix removed and
a readable log: at worst a segment without its (advisory) index. control.json is unaffected:
the newest segment, which holds the end of the log, is never removed. Readers asking for a
removed LSN get ``LsnNotRetainedError`` naming the oldest one left.

Example::

    policy = RetentionPolicy(max_bytes=1 << 30, max_pinned_bytes=4 << 30)
    report = prune("data/shard-0", policy)         # under the shard's retention lock
    [(d.segment, d.reason) for d in report.deleted]
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.datadir.consumers import Holder, holders, mark_lost
from moonish.datadir.layout import retention_lock
from moonish.datadir.policy import RetentionPolicy
from moonish.errors import ConsumerNotFoundError, InvalidArgumentError, LsnDiscardedError
from moonish.fileio import fsync_dir
from moonish.log.reader import ShardReader
from moonish.log.segment import index_path, list_segments, list_snapshots, segment_path
from moonish.metrics.families import RETENTION_DELETED_BYTES, RETENTION_DELETED_SEGMENTS

KEYSPACE_MARKER = "stream.json"
"""A shard with this file (moonish.state.config) has a keyspace its writer rebuilds from the
newest snapshot and the records after it."""


@dataclass(frozen=True, slots=True)
class Deletion:
    """A sealed segment retention removes (or would): its LSNs (inclusive), size and why."""

    segment: str
    base_lsn: int
    last_lsn: int
    bytes: int
    reason: str
    """The rule: ``max_bytes``, ``max_age_ms``, ``max_records`` or ``before``."""

    def to_json(self) -> dict[str, object]:
        return {
            "segment": os.path.basename(self.segment),
            "first_lsn": self.base_lsn,
            "last_lsn": self.last_lsn,
            "bytes": self.bytes,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """What retention would do to one shard now.

    Attributes:
        deletions: the segments to remove, oldest first (a prefix of the log).
        held_by: why the first segment that stays stays although a rule wants it
            (``"active segment"``, ``"min_age_ms"``, ``"snapshot at LSN <n>"``,
            ``"consumer <name>"``), or ``None`` when no rule wants it.
        reserved_from: the first LSN the policy keeps without counting consumers: a
            consumer whose next LSN is at or after it is ``reserved``, before it ``extended``.
        pinned_bytes: bytes the rest of the policy would remove that consumers hold.
        pinning: the consumers that hold those bytes, laggiest first.
        snapshot_blocked: the snapshot rule is what holds back a segment the other rules
            would remove (a new snapshot would let it go; consumers do not hold it).
    """

    shard_dir: str
    deletions: tuple[Deletion, ...]
    held_by: str | None
    reserved_from: int
    pinned_bytes: int
    pinning: tuple[Holder, ...]
    snapshot_blocked: bool


@dataclass(frozen=True, slots=True)
class LostConsumer:
    """A consumer retention marked ``lost`` (or, in a dry run, would)."""

    data_dir: str
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What :func:`prune` did (``dry_run``: would do) to one shard."""

    shard_dir: str
    dry_run: bool
    deleted: tuple[Deletion, ...]
    lost: tuple[LostConsumer, ...]
    held_by: str | None
    snapshot_blocked: bool

    def to_json(self) -> dict[str, object]:
        return {
            "shard_dir": self.shard_dir,
            "dry_run": self.dry_run,
            "deleted": [deletion.to_json() for deletion in self.deleted],
            "deleted_bytes": sum(deletion.bytes for deletion in self.deleted),
            "lost": [
                {"data_dir": lost.data_dir, "consumer": lost.name, "reason": lost.reason}
                for lost in self.lost
            ],
            "held_by": self.held_by,
            "snapshot_blocked": self.snapshot_blocked,
        }


def snapshot_floor(shard_dir: str) -> int | None:
    """The last LSN retention may remove because of snapshots: the oldest snapshot's LSN;
    0 for a keyspace shard without one; ``None`` (no limit) for a shard without a keyspace."""
    snapshots = list_snapshots(shard_dir)
    if snapshots:
        return snapshots[0]
    return 0 if os.path.exists(os.path.join(shard_dir, KEYSPACE_MARKER)) else None


def plan(
    shard_dir: str,
    policy: RetentionPolicy,
    *,
    now_ms: int,
    before: int | None = None,
    excluded: frozenset[tuple[str, str]] = frozenset(),
    with_consumers: bool = True,
) -> Plan:
    """What retention would remove from ``shard_dir`` now (reads; changes nothing).

    Args:
        policy: the rules (ignored when ``before`` is given).
        now_ms: the time ages are measured against, ms since the Unix epoch.
        before: remove the sealed segments whose records all have LSNs at or below this
            (``wal prune --before``) instead of applying the policy; only the newest segment
            and snapshots hold them back, consumers are reported in ``pinning``.
        excluded: ``(data_dir, name)`` of consumers to leave out (marked lost meanwhile).
        with_consumers: ``False``: what the policy alone keeps (consumers are not read).

    Raises:
        InvalidArgumentError: not a shard directory.
        CorruptionError: a segment damaged where the age rules read its newest record, or a
            damaged consumer file.
    """
    bases = list_segments(shard_dir)
    sizes = [os.path.getsize(segment_path(shard_dir, base)) for base in bases]
    rules = _Rules(shard_dir, policy, now_ms, before, sum(sizes))
    floor = snapshot_floor(shard_dir)
    wanted: list[Deletion] = []
    held_by: str | None = None
    snapshot_blocked = False
    try:
        for i, base in enumerate(bases):
            last = bases[i + 1] - 1 if i + 1 < len(bases) else None
            reason = rules.reason(base, last, sizes[i])
            if reason is None:
                break
            if last is None:
                held_by = "active segment"
                break
            if rules.too_young(base, last):
                held_by = "min_age_ms"
                break
            if floor is not None and last > floor:
                held_by, snapshot_blocked = f"snapshot at LSN {floor}", True
                break
            wanted.append(Deletion(segment_path(shard_dir, base), base, last, sizes[i], reason))
    finally:
        rules.close()
    pins = [
        holder
        for holder in (holders(shard_dir) if wanted and with_consumers else [])
        if (holder.data_dir, holder.consumer.name) not in excluded
    ]
    keep = len(wanted)
    if pins:
        keep = sum(1 for deletion in wanted if deletion.last_lsn <= pins[0].position)
        if keep < len(wanted):
            held_by, snapshot_blocked = f"consumer {pins[0].consumer.name}", False
    needed = wanted[-1].last_lsn if wanted else 0
    return Plan(
        shard_dir,
        tuple(wanted[:keep]),
        held_by,
        needed + 1 if wanted else (bases[0] if bases else 0),
        sum(deletion.bytes for deletion in wanted[keep:]),
        tuple(holder for holder in pins if holder.position < needed),
        snapshot_blocked,
    )


class _Rules:
    """The deleting rules over one shard's segments, oldest first; reads a segment's newest
    record only when an age rule needs it, and the end of the log only for ``max_records``."""

    def __init__(
        self,
        shard_dir: str,
        policy: RetentionPolicy,
        now_ms: int,
        before: int | None,
        total_bytes: int,
    ) -> None:
        self.policy, self.now_ms, self.before = policy, now_ms, before
        self.remaining_bytes = total_bytes
        self._reader = ShardReader(shard_dir)
        self._end: int | None = None
        self._ages: dict[int, int | None] = {}

    def close(self) -> None:
        self._reader.close()

    def reason(self, base: int, last: int | None, size: int) -> str | None:
        """The rule that wants the segment starting at ``base`` (``last``: its last LSN,
        ``None`` for the newest), given that every older one goes."""
        policy, remaining = self.policy, self.remaining_bytes
        self.remaining_bytes -= size
        if self.before is not None:
            return "before" if (base if last is None else last) <= self.before else None
        if policy.max_bytes is not None and remaining > policy.max_bytes:
            return "max_bytes"
        if policy.max_records is not None and self.end() - base > policy.max_records:
            return "max_records"
        if policy.max_age_ms is not None:
            age = self.age_ms(base, last)
            if age is None or age > policy.max_age_ms:
                return "max_age_ms"
        return None

    def too_young(self, base: int, last: int) -> bool:
        """Whether ``min_age_ms`` (not applied to ``before``) keeps the segment."""
        if self.policy.min_age_ms is None or self.before is not None:
            return False
        age = self.age_ms(base, last)
        return age is not None and age < self.policy.min_age_ms

    def end(self) -> int:
        if self._end is None:
            self._reader.seek_end()
            self._end = self._reader.next_lsn
        return self._end

    def age_ms(self, base: int, last: int | None) -> int | None:
        """Age of the segment's newest record (``None``: it holds none; the newest segment
        is always as young as can be)."""
        if last is None:
            return 0
        if base not in self._ages:
            self._ages[base] = self._newest_commit_us(base, last)
        commit_us = self._ages[base]
        return None if commit_us is None else self.now_ms - commit_us // 1000

    def _newest_commit_us(self, base: int, last: int) -> int | None:
        lsn = last
        while lsn >= base:
            try:
                self._reader.seek(lsn)
            except LsnDiscardedError as error:  # the segment ends with LSNs a repair cut out
                lsn = error.first_lsn - 1
                continue
            frames = self._reader.poll(1)
            return frames[0].commit_us if frames else None
        return None


def prune(
    shard_dir: str,
    policy: RetentionPolicy,
    *,
    clock: Clock = SYSTEM_CLOCK,
    dry_run: bool = False,
    before: int | None = None,
    force: bool = False,
) -> PruneReport:
    """Apply ``policy`` (or ``before``) to one shard: mark consumers ``lost`` where
    ``max_pinned_bytes`` says so, then remove the planned segments oldest first. Holds the
    shard's retention lock (exclusive) throughout, so no consumer is set back meanwhile.

    Args:
        policy: the shard's policy (see :class:`RetentionPolicy`).
        clock: the time ages are measured against (and lost consumers are stamped with).
        dry_run: plan and report only; nothing is removed and nobody is marked.
        before: remove what lies at or below this LSN instead (``wal prune --before``).
        force: with ``before``, pass consumers' positions (marking them lost).

    Raises:
        InvalidArgumentError: ``before`` would remove changes a consumer has not confirmed
            and ``force`` was not given (nothing is removed then).
        CorruptionError: a damaged segment where ages are read, or a damaged consumer file
            (nothing is removed: what consumers need is unknown).
        OSError: a removal failed; the log stays readable (a prefix was removed).
    """
    now_ms = clock.now_us() // 1000
    lost: list[LostConsumer] = []
    with retention_lock([shard_dir], exclusive=True):
        while True:
            excluded = frozenset((entry.data_dir, entry.name) for entry in lost)
            found = plan(shard_dir, policy, now_ms=now_ms, before=before, excluded=excluded)
            if before is not None and found.pinning:
                if not force:
                    names = ", ".join(sorted({h.consumer.name for h in found.pinning}))
                    raise InvalidArgumentError(
                        f"pruning before LSN {before} would remove changes consumer(s) {names} "
                        "have not confirmed; give --force to mark them lost",
                        path=shard_dir,
                    )
                victims = list(found.pinning)
                why = f"wal prune --before {before} --force removed changes after its position"
            elif policy.max_pinned_bytes is not None and (
                found.pinned_bytes > policy.max_pinned_bytes
            ):
                victims = [found.pinning[0]]
                why = (
                    f"held {found.pinned_bytes} bytes of {shard_dir} beyond max_pinned_bytes "
                    f"{policy.max_pinned_bytes} (the laggiest, at LSN {victims[0].position})"
                )
            else:
                break
            for holder in victims:
                lost.append(LostConsumer(holder.data_dir, holder.consumer.name, why))
                if not dry_run:
                    with contextlib.suppress(ConsumerNotFoundError):  # dropped meanwhile
                        mark_lost(
                            holder.data_dir,
                            holder.consumer.name,
                            why,
                            shard=holder.component,
                            clock=clock,
                        )
        if not dry_run:
            delete_segments(shard_dir, found.deletions)
    return PruneReport(
        shard_dir, dry_run, found.deletions, tuple(lost), found.held_by, found.snapshot_blocked
    )


def delete_segments(shard_dir: str, deletions: Sequence[Deletion]) -> None:
    """Remove ``deletions`` (the oldest segments, oldest first): each index, then its segment,
    then an fsync of the directory, so a crash leaves a prefix removed. Already removed files
    (another pruner, a person) are skipped. Each removal is counted
    (``moonish_retention_deleted_segments_total``, ``..._bytes_total``).

    Raises:
        InvalidArgumentError: ``deletions`` is not a run of the oldest segments in order.
        OSError: a removal or the directory fsync failed.
    """
    bases = list_segments(shard_dir)
    wanted = [deletion.base_lsn for deletion in deletions]
    present = [base for base in wanted if base in bases]
    if wanted != sorted(wanted) or present != bases[: len(present)] or present == bases:
        raise InvalidArgumentError(
            "retention removes a run of the oldest sealed segments, oldest first, never the newest",
            path=shard_dir,
        )
    shard = os.path.basename(os.path.normpath(shard_dir)).removeprefix("shard-")
    for deletion in deletions:
        removed = os.path.exists(deletion.segment)  # (not counted if another pruner did)
        for path in (index_path(shard_dir, deletion.base_lsn), deletion.segment):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        fsync_dir(shard_dir)
        if removed:
            RETENTION_DELETED_SEGMENTS.labels(shard).inc()
            RETENTION_DELETED_BYTES.labels(shard).inc(deletion.bytes)


def prune_shards(
    shard_dirs: Sequence[str],
    policies: Sequence[RetentionPolicy],
    *,
    before: Sequence[int] | None = None,
    force: bool = False,
    dry_run: bool = False,
    clock: Clock = SYSTEM_CLOCK,
) -> list[PruneReport]:
    """:func:`prune` over the shards of a data directory (``before``: one LSN per shard, a
    token's positions). Without ``force``, ``before`` is checked on every shard before any is
    pruned, so a refusal removes nothing.

    Raises:
        As :func:`prune`.
    """
    cuts: Sequence[int | None] = before if before is not None else [None] * len(shard_dirs)
    if before is not None and not force and not dry_run:
        for shard, policy, cut in zip(shard_dirs, policies, cuts, strict=True):
            prune(shard, policy, clock=clock, dry_run=True, before=cut)
    return [
        prune(shard, policy, clock=clock, dry_run=dry_run, before=cut, force=force)
        for shard, policy, cut in zip(shard_dirs, policies, cuts, strict=True)
    ]
