"""Named consumers: per-shard positions stored in the data directory, that pin the log.

A consumer (like a PostgreSQL replication slot or a Kafka consumer group) has a name and, per
shard, the last LSN it has confirmed (0: none). Its position is exactly a token's positions
(moonish.cdc.token): exclusive, "the changes after this". Retention (moonish.datadir.retention)
never removes a change a consumer that is not ``lost`` has not confirmed, unless the policy's
``max_pinned_bytes`` marks it ``lost`` first.

Files (docs/consumers.md)::

    <data_dir>/consumers/<name>.json     one per consumer, replaced atomically, with a crc32c
    <data_dir>/consumers/<name>.lock     flock around every read-modify-write of it
    <shard_dir>/RETENTION.lock           flock: shared while a position is set (create, seek),
                                         exclusive while retention plans and deletes

    {
      "format": "moonish-consumer",
      "version": 1,
      "name": "export",
      "shards": 4,                       how many shards the data directory had
      "positions": [1234, 12, 0, 99999], confirmed LSN per shard, shard 0 first
      "owner": "cli",                    what registered it (or null)
      "created_ms": ..., "updated_ms": ...,   ms since the Unix epoch
      "status": "active" | "lost",
      "lost_reason": null | "...", "lost_ms": null | ..., "lost_shard": null | <k>,
      "crc32c": <checksum of the bytes before this member>
    }

A data directory holds ``shard-<k>`` directories; a shard directory given where a data
directory is expected is a data directory of one shard, and its consumers live inside it
(``<shard_dir>/consumers/``, a directory every listing of a shard ignores). Retention of
shard ``k`` of a data directory honours both: the data directory's consumers (component ``k``)
and the shard's own (component 0).

Concurrency: ``ack`` takes the consumer's lock only (positions move forward, so it can never
need a removed change). ``create`` and ``seek`` may move a position back: they also hold every
shard's retention lock shared while they check that the position is still retained and write
it, so a prune (exclusive) never deletes what a consumer is being set to.

Example::

    create("data", "export", (0, 0, 0, 0), owner="export")
    ack("data", "export", (120, 4, 0, 77))      # component-wise max with the stored position
    pins("data")                                # [120, 4, 0, 77]: what retention must keep
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.datadir.layout import (
    check_count,
    check_position,
    flock,
    oldest_lsn,
    retention_lock,
    roots_of_shard,
    shard_dirs,
)
from moonish.errors import (
    ConsumerLostError,
    ConsumerNotFoundError,
    CorruptionError,
    InvalidArgumentError,
)
from moonish.fileio import dump_checked, fsync_dir, read_checked, replace_atomically

CONSUMERS_DIR = "consumers"
FORMAT, VERSION = "moonish-consumer", 1
ACTIVE, LOST = "active", "lost"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""Consumer names: what a file name can hold safely, never ``.``-hidden."""
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "owner": (str, type(None)),
    "created_ms": int,
    "updated_ms": int,
    "status": str,
    "lost_reason": (str, type(None)),
    "lost_ms": (int, type(None)),
    "lost_shard": (int, type(None)),
}


@dataclass(frozen=True, slots=True)
class Consumer:
    """A stored consumer (see the module docstring for the fields)."""

    name: str
    positions: tuple[int, ...]
    owner: str | None
    created_ms: int
    updated_ms: int
    status: str = ACTIVE
    lost_reason: str | None = None
    lost_ms: int | None = None
    lost_shard: int | None = None

    @property
    def shards(self) -> int:
        return len(self.positions)

    @property
    def lost(self) -> bool:
        return self.status == LOST

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "shards": self.shards,
            "positions": list(self.positions),
            "owner": self.owner,
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
            "status": self.status,
            "lost_reason": self.lost_reason,
            "lost_ms": self.lost_ms,
            "lost_shard": self.lost_shard,
        }


@dataclass(frozen=True, slots=True)
class Holder:
    """A consumer that holds a shard's log: where its data directory is, which component of
    its position is this shard, and that component (the last LSN it confirmed there)."""

    data_dir: str
    consumer: Consumer
    component: int
    position: int


# -- where things are ----------------------------------------------------------------------


def consumers_dir(data_dir: str | os.PathLike[str]) -> str:
    """``<data_dir>/consumers``."""
    return os.path.join(os.fspath(data_dir), CONSUMERS_DIR)


def validate_name(name: str) -> str:
    """``name`` if it is a consumer name (``[A-Za-z0-9][A-Za-z0-9._-]{0,63}``).

    Raises:
        InvalidArgumentError: any other name.
    """
    if not NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"consumer names are 1 to 64 of A-Z a-z 0-9 . _ - (not starting with . _ -), "
            f"got {name!r}"
        )
    return name


# -- reading and writing one file ----------------------------------------------------------


def _path(data_dir: str, name: str) -> str:
    return os.path.join(consumers_dir(data_dir), f"{name}.json")


def _read(data_dir: str, name: str) -> Consumer | None:
    path = _path(data_dir, name)
    document = read_checked(path, FORMAT, VERSION)
    return None if document is None else _parse(document, path)


def _parse(document: dict[str, object], path: str) -> Consumer:
    try:
        positions = document["positions"]
        if not isinstance(positions, list) or len(positions) != document["shards"]:
            raise ValueError(f"positions {positions!r} for {document['shards']!r} shards")
        if any(not isinstance(p, int) or p < 0 for p in positions):
            raise ValueError(f"positions {positions!r}")
        _check_types(document)
        fields = {key: document[key] for key in _FIELD_TYPES}
        consumer = Consumer(positions=tuple(positions), **fields)  # type: ignore[arg-type]
        if consumer.status not in (ACTIVE, LOST) or not NAME.fullmatch(consumer.name):
            raise ValueError(f"status {consumer.status!r}, name {consumer.name!r}")
        if os.path.basename(path) != f"{consumer.name}.json":
            raise ValueError(f"name {consumer.name!r} in another consumer's file")
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptionError(f"bad consumer file fields: {error}", path=path) from None
    return consumer


def _check_types(document: dict[str, object]) -> None:
    for key, kinds in _FIELD_TYPES.items():
        value = document[key]
        if (
            not isinstance(value, kinds)
            or isinstance(value, bool)
            or (isinstance(value, int) and value < 0)
        ):
            raise TypeError(f"{key} {value!r}")


def _write(data_dir: str, consumer: Consumer) -> None:
    replace_atomically(_path(data_dir, consumer.name), [dump_checked(consumer.to_json())])


@contextlib.contextmanager
def _locked(data_dir: str, name: str) -> Iterator[None]:
    """Hold consumer ``name``'s lock; a lock file whose consumer does not exist afterwards
    (dropped, never made) is removed while held (a waiter then opens a new one)."""
    directory = consumers_dir(data_dir)
    os.makedirs(directory, exist_ok=True)
    lock = os.path.join(directory, f"{validate_name(name)}.lock")
    with flock(lock):
        try:
            yield
        finally:
            if not os.path.exists(_path(data_dir, name)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)


def _existing(data_dir: str, name: str) -> Consumer:
    consumer = _read(data_dir, name)
    if consumer is None:
        raise ConsumerNotFoundError(name, path=consumers_dir(data_dir))
    return consumer


def _now_ms(clock: Clock) -> int:
    return clock.now_us() // 1000


# -- errors --------------------------------------------------------------------------------


def lost_error(
    data_dir: str, consumer: Consumer, shard: int, oldest: int, oldest_token: str | None = None
) -> ConsumerLostError:
    """The error of ``consumer`` (of ``data_dir``), which cannot go on in shard ``shard``
    (component ``shard``; its oldest retained LSN is ``oldest``)."""
    wanted = consumer.positions[shard] + 1
    return ConsumerLostError(
        consumer.name,
        status=consumer.status,
        reason=consumer.lost_reason,
        shard=shard,
        requested_lsn=wanted,
        oldest_lsn=oldest,
        gone=max(0, oldest - wanted),
        oldest_token=oldest_token,
        path=_path(data_dir, consumer.name),
    )


def _marked_lost(root: str, consumer: Consumer, shards: list[str]) -> ConsumerLostError:
    """The error of a consumer marked ``lost``, naming the shard it was lost in."""
    k = consumer.lost_shard or 0
    return lost_error(root, consumer, k, oldest_lsn(shards[k]))


# -- the operations ------------------------------------------------------------------------


def create(
    data_dir: str | os.PathLike[str],
    name: str,
    positions: Sequence[int],
    *,
    owner: str | None = None,
    replace: bool = False,
    clock: Clock = SYSTEM_CLOCK,
) -> Consumer:
    """Register consumer ``name`` at ``positions`` (per shard, the last LSN it has seen).

    Args:
        data_dir: a data directory, or a shard directory (a data directory of one shard).
        positions: one LSN per shard, shard 0 first (a token's positions; 0: nothing seen).
        owner: what registers it (``"cli"``, ``"export"``, ``"spark"``...), shown in lists.
        replace: overwrite a consumer of the same name (its old position is forgotten).

    Raises:
        InvalidArgumentError: a bad name, a consumer of that name exists (without
            ``replace``), a position count other than the shard count, a position beyond
            the end of its shard's log.
        LsnNotRetainedError: a position whose next changes are no longer retained.
    """
    root = os.fspath(data_dir)
    validate_name(name)
    shards = shard_dirs(root)
    check_count(shards, positions, root)
    with retention_lock(shards, exclusive=False), _locked(root, name):
        if not replace and _read(root, name) is not None:
            raise InvalidArgumentError(
                f"consumer {name!r} exists (drop it, seek it, or replace it)",
                path=_path(root, name),
            )
        for shard, position in zip(shards, positions, strict=True):
            check_position(shard, position, retained=True)
        now = _now_ms(clock)
        consumer = Consumer(name, tuple(positions), owner, now, now)
        _write(root, consumer)
    return consumer


def load(data_dir: str | os.PathLike[str], name: str) -> Consumer:
    """The stored consumer ``name``.

    Raises:
        ConsumerNotFoundError: there is none (an ``InvalidArgumentError``).
        CorruptionError: its file is damaged.
        UnsupportedFormatError: its file is of another format or version.
    """
    return _existing(os.fspath(data_dir), validate_name(name))


def list_consumers(data_dir: str | os.PathLike[str]) -> list[Consumer]:
    """Every consumer of ``data_dir``, by name (``[]`` when it has none). Each file is read
    once without a lock: files are replaced atomically, so each is the old or the new one.

    Raises:
        CorruptionError, UnsupportedFormatError: a damaged consumer file (named).
    """
    root = os.fspath(data_dir)
    try:
        names = os.listdir(consumers_dir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in sorted(names):
        stem = entry[: -len(".json")]
        if entry.endswith(".json") and NAME.fullmatch(stem):
            consumer = _read(root, stem)
            if consumer is not None:  # dropped since the listing
                found.append(consumer)
    return found


def ack(
    data_dir: str | os.PathLike[str],
    name: str,
    positions: Sequence[int],
    *,
    clock: Clock = SYSTEM_CLOCK,
) -> Consumer:
    """Confirm ``positions``: each shard's position becomes the larger of the stored one and
    the given one (a position never moves back here; an older ack is a no-op).

    Returns:
        The consumer as stored after the ack.

    Raises:
        ConsumerNotFoundError: no such consumer.
        ConsumerLostError: the consumer is ``lost`` (reset it with :func:`seek`).
        InvalidArgumentError: a position count other than the consumer's shard count, or a
            position beyond the end of its shard's log (nothing is stored then).
    """
    root = os.fspath(data_dir)
    shards = shard_dirs(root)
    check_count(shards, positions, root)
    with _locked(root, name):
        consumer = _existing(root, name)
        if consumer.shards != len(positions):
            raise InvalidArgumentError(
                f"consumer {name!r} has {consumer.shards} shard positions, got {len(positions)}",
                path=_path(root, name),
            )
        if consumer.lost:
            raise _marked_lost(root, consumer, shards)
        merged = tuple(map(max, consumer.positions, positions))
        if merged == consumer.positions:
            return consumer
        for shard, old, new in zip(shards, consumer.positions, merged, strict=True):
            if new > old:
                check_position(shard, new, retained=False)
        consumer = dataclasses.replace(consumer, positions=merged, updated_ms=_now_ms(clock))
        _write(root, consumer)
    return consumer


def seek(
    data_dir: str | os.PathLike[str],
    name: str,
    positions: Sequence[int],
    *,
    clock: Clock = SYSTEM_CLOCK,
) -> Consumer:
    """Reset consumer ``name`` to ``positions`` (back or forward) and clear ``lost``.

    Raises:
        ConsumerNotFoundError: no such consumer.
        InvalidArgumentError: a position count other than the shard count, or a position
            beyond the end of its shard's log.
        LsnNotRetainedError: a position whose next changes are no longer retained (seek to
            ``earliest`` instead, accepting the gap).
    """
    root = os.fspath(data_dir)
    shards = shard_dirs(root)
    check_count(shards, positions, root)
    with retention_lock(shards, exclusive=False), _locked(root, name):
        consumer = _existing(root, name)
        for shard, position in zip(shards, positions, strict=True):
            check_position(shard, position, retained=True)
        consumer = Consumer(
            consumer.name, tuple(positions), consumer.owner, consumer.created_ms, _now_ms(clock)
        )
        _write(root, consumer)
    return consumer


def drop(data_dir: str | os.PathLike[str], name: str) -> None:
    """Remove consumer ``name``: it no longer pins anything.

    Raises:
        ConsumerNotFoundError: no such consumer.
    """
    root = os.fspath(data_dir)
    directory = consumers_dir(root)
    with _locked(root, name):
        try:
            os.unlink(_path(root, name))
        except FileNotFoundError:
            raise ConsumerNotFoundError(name, path=directory) from None
        fsync_dir(directory)


def mark_lost(
    data_dir: str | os.PathLike[str],
    name: str,
    reason: str,
    *,
    shard: int | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Consumer:
    """Mark consumer ``name`` ``lost`` with ``reason`` (``shard``: the component whose changes
    it will miss). From then on it pins nothing, and reads and acks fail with
    :class:`~moonish.errors.ConsumerLostError` until :func:`seek`. Marking a lost consumer
    again keeps the first reason.

    Raises:
        ConsumerNotFoundError: no such consumer.
    """
    root = os.fspath(data_dir)
    with _locked(root, name):
        consumer = _existing(root, name)
        if consumer.lost:
            return consumer
        now = _now_ms(clock)
        consumer = dataclasses.replace(
            consumer,
            updated_ms=now,
            status=LOST,
            lost_reason=reason,
            lost_ms=now,
            lost_shard=shard,
        )
        _write(root, consumer)
    return consumer


def pins(data_dir: str | os.PathLike[str]) -> list[int | None]:
    """Per shard of ``data_dir``: the lowest position of its consumers that are not lost
    (``None``: no consumer holds that shard). Retention keeps every LSN above it. A consumer
    registered when the data directory had another shard count still pins the shards both
    have (retention errs on the side of keeping).

    Raises:
        InvalidArgumentError: not a data directory.
        CorruptionError, UnsupportedFormatError: a damaged consumer file.
    """
    count = len(shard_dirs(data_dir))
    lowest: list[int | None] = [None] * count
    for consumer in list_consumers(data_dir):
        if consumer.lost:
            continue
        for k, position in enumerate(consumer.positions[:count]):  # as :func:`holders`
            current = lowest[k]
            lowest[k] = position if current is None else min(current, position)
    return lowest


def holders(shard_dir: str) -> list[Holder]:
    """The consumers that are not lost and hold ``shard_dir``: those of its data directory
    (with its component) and its own, lowest position first (then by name).

    Raises:
        CorruptionError, UnsupportedFormatError: a damaged consumer file.
    """
    found = []
    for root, component in roots_of_shard(shard_dir):
        for consumer in list_consumers(root):
            if not consumer.lost and component < consumer.shards:
                found.append(Holder(root, consumer, component, consumer.positions[component]))
    found.sort(key=lambda holder: (holder.position, holder.consumer.name, holder.data_dir))
    return found


def register_sink(
    data_dir: str | os.PathLike[str],
    name: str,
    positions: Sequence[int],
    *,
    owner: str,
    authoritative: bool,
    clock: Clock = SYSTEM_CLOCK,
) -> Consumer:
    """Register a sink (an export, a Spark query) as consumer ``name`` so retention keeps
    what it has not delivered: create it at ``positions`` if it does not exist; if it does
    and the sink's own state is ``authoritative`` (the export's committed files), move it
    there (:func:`seek`); otherwise leave it (a Spark query resumes from its checkpoint and
    acknowledges as it commits).

    Raises:
        ConsumerLostError: it exists and is ``lost``: retention may have removed what the
            sink has not delivered; ``moonish consumer seek`` (or drop) it to go on.
        InvalidArgumentError, LsnNotRetainedError: as :func:`create` and :func:`seek`.
    """
    root = os.fspath(data_dir)
    existing = _read(root, validate_name(name))
    if existing is None:
        return create(root, name, positions, owner=owner, clock=clock)
    if existing.lost:
        raise _marked_lost(root, existing, shard_dirs(root))
    if authoritative and tuple(positions) != existing.positions:
        return seek(root, name, positions, clock=clock)
    return existing
