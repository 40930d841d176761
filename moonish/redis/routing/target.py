"""Checks an import or a capture makes of its target before it creates anything: a data
directory that makes sense for the source (not a file, not a shard directory, not the source
or inside it, the same ``shard-0..shard-<n-1>`` as an existing data directory), a shard count
in range, and the open-file limit: each shard's writer holds :data:`DESCRIPTORS_PER_SHARD`
descriptors for the whole import. A soft ``RLIMIT_NOFILE`` below what the import needs is
raised up to the hard limit, as Redis and Kafka do at startup; a hard limit below it refuses
the import. The AOF import adds its own checks (moonish.redis.aof.checks).
"""

from __future__ import annotations

import os
import re
import resource

from moonish.errors import InvalidArgumentError, MoonishError
from moonish.log.format import (
    CONTROL_NAME,
    INDEX_SUFFIX,
    LOCK_NAME,
    NAME_HEX_DIGITS,
    SEGMENT_SUFFIX,
)
from moonish.log.segment import SNAPSHOT_SUFFIX
from moonish.slots import SLOT_COUNT

MAX_SHARDS = SLOT_COUNT
"""Every shard owns at least one hash slot."""

DESCRIPTORS_PER_SHARD = 4
"""Descriptors a shard's writer holds while the import runs: LOCK, the open segment, its index,
the socket it answers requests on (moonish.state.requests)."""

DESCRIPTOR_MARGIN = 32
"""Descriptors needed beyond the writers' and those already open: the AOF file being read, the
temporary files and directories opened while writing control files, and some slack."""

_SHARD_NAME = re.compile(r"shard-(0|[1-9][0-9]*)")
_WAL_FILE = re.compile(
    rf"[0-9a-f]{{{NAME_HEX_DIGITS}}}"
    rf"({re.escape(SEGMENT_SUFFIX)}|{re.escape(INDEX_SUFFIX)}|{re.escape(SNAPSHOT_SUFFIX)})"
)


def descriptors_needed(shards: int) -> int:
    """Open file descriptors an import into ``shards`` shards needs: :data:`DESCRIPTORS_PER_SHARD`
    per shard, the descriptors this process has open now, and :data:`DESCRIPTOR_MARGIN`."""
    return DESCRIPTORS_PER_SHARD * shards + _descriptors_in_use() + DESCRIPTOR_MARGIN


def _descriptors_in_use() -> int:
    for directory in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(len(os.listdir(directory)) - 1, 0)  # not the one listdir used
        except OSError:
            continue
    return DESCRIPTOR_MARGIN  # no way to count them here: assume another margin's worth


def check_descriptors(shards: int, *, raise_soft: bool) -> None:
    """Refuse when the hard ``RLIMIT_NOFILE`` is below :func:`descriptors_needed`; with
    ``raise_soft``, raise a soft limit below it (up to what is needed)."""
    needed = descriptors_needed(shards)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise _too_few_descriptors(shards, needed, hard, "hard limit")
    if raise_soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        except (ValueError, OSError) as exc:
            raise _too_few_descriptors(
                shards, needed, soft, f"soft limit, which could not be raised: {exc}"
            ) from None


def _too_few_descriptors(shards: int, needed: int, allowed: int, which: str) -> MoonishError:
    others = needed - DESCRIPTORS_PER_SHARD * shards
    fit = (allowed - others) // DESCRIPTORS_PER_SHARD
    advice = f" or import into at most {fit} shards" if fit >= 1 else ""
    return InvalidArgumentError(
        f"importing into {shards} shards needs {needed} open file descriptors "
        f"({DESCRIPTORS_PER_SHARD} per shard plus {others} for the process), but this process "
        f"may open only {allowed} (RLIMIT_NOFILE {which}); raise the limit to at least "
        f"{needed} (ulimit -n {needed}){advice}; nothing was created"
    )


def check_shard_range(shards: int) -> None:
    if not 1 <= shards <= MAX_SHARDS:
        raise InvalidArgumentError(f"--shards must be between 1 and {MAX_SHARDS}, got {shards}")


def _is_shard_dir(path: str) -> bool:
    """Whether ``path`` holds a shard's WAL: segment, index or snapshot files, or its LOCK and
    control file (a shard whose segments retention removed)."""
    try:
        names = set(os.listdir(path))
    except OSError:
        return False
    if any(_WAL_FILE.fullmatch(name) for name in names):
        return True
    markers = names & {LOCK_NAME, CONTROL_NAME}
    return len(markers) == 2 or bool(markers and _SHARD_NAME.fullmatch(os.path.basename(path)))


def _within(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def check_target(data_dir: str, shards: int, *, source: str | None) -> None:
    """The checks of the target that ``check_import`` (moonish.redis.aof.checks) makes, for
    another source (an RDB file ``source``, or ``None`` for a source that is no file: a live
    capture): a data directory that makes no sense, or holds other shards.

    Raises:
        InvalidArgumentError: as moonish.redis.aof.checks ``check_import``.
    """
    check_shard_range(shards)
    check_data_dir(source, data_dir, what="RDB file")
    check_shard_count(data_dir, shards)


def check_data_dir(aof_dir: str | None, out_dir: str, what: str = "AOF directory") -> None:
    """Refuse data directories that make no sense, naming the path (``aof_dir``: the source
    file or directory the data directory must not be in or hold, if any)."""
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise InvalidArgumentError("the data directory exists and is not a directory", path=out_dir)
    real_out = os.path.realpath(out_dir)
    real_aof = os.path.realpath(aof_dir) if aof_dir is not None else None
    if real_aof is not None and _within(real_out, real_aof):
        where = (
            "the AOF directory" if real_out == real_aof else f"inside the AOF directory {aof_dir}"
        )
        raise InvalidArgumentError(
            f"the data directory is {where}; pass a directory of its own", path=out_dir
        )
    if real_aof is not None and _within(real_aof, real_out):
        first = os.path.relpath(real_aof, real_out).split(os.sep)[0]
        if _SHARD_NAME.fullmatch(first):
            raise InvalidArgumentError(
                f"the {what} is inside {first} of the data directory, which the import "
                "writes to; pass another data directory",
                path=out_dir,
            )
    existing = real_out
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise InvalidArgumentError(
            f"the data directory cannot be created: {existing} is not a directory", path=out_dir
        )
    if existing != real_out and not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidArgumentError(
            f"the data directory cannot be created: {existing} is not writable", path=out_dir
        )
    if _is_shard_dir(real_out):
        raise InvalidArgumentError(
            "this is a shard directory (it holds WAL files), not a data directory; pass the "
            "directory that holds the shard-<k> directories, or a new directory",
            path=out_dir,
        )
    ancestor = existing
    while True:
        if ancestor != real_out and _is_shard_dir(ancestor):
            raise InvalidArgumentError(
                f"the data directory would be inside the shard directory {ancestor}; pass a "
                "directory outside it",
                path=out_dir,
            )
        parent = os.path.dirname(ancestor)
        if parent == ancestor:
            break
        ancestor = parent
    parent = os.path.dirname(real_out)
    if _SHARD_NAME.fullmatch(os.path.basename(real_out)) and any(
        _SHARD_NAME.fullmatch(name) and _is_shard_dir(os.path.join(parent, name))
        for name in _listdir(parent)
    ):
        raise InvalidArgumentError(
            f"this is a shard of the data directory {parent}; pass that directory instead",
            path=out_dir,
        )


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def check_shard_count(data_dir: str, shards: int) -> None:
    """An existing data directory must hold exactly ``shard-0..shard-<shards-1>`` (or none),
    each a writable directory, and be writable when a shard is missing."""
    if not os.path.isdir(data_dir):
        return
    names = [name for name in os.listdir(data_dir) if name.startswith("shard-")]
    for name in sorted(names):
        if not _SHARD_NAME.fullmatch(name) or not os.path.isdir(os.path.join(data_dir, name)):
            raise InvalidArgumentError(
                f"the data directory holds {name!r}, which is not a shard directory "
                "(shard-<k>); pass a moonish data directory or a new directory",
                path=data_dir,
            )
    existing = sorted(int(name[len("shard-") :]) for name in names)
    if existing and len(existing) != shards:
        raise InvalidArgumentError(
            f"the data directory has {len(existing)} shards; importing with {shards} would "
            "route keys to different shards",
            path=data_dir,
        )
    if existing and existing != list(range(shards)):
        odd = [f"shard-{k}" for k in existing if k >= shards]
        raise InvalidArgumentError(
            f"the data directory holds {', '.join(odd)}; an import into {shards} shards "
            f"writes shard-0..shard-{shards - 1}",
            path=data_dir,
        )
    for shard in existing:
        path = os.path.join(data_dir, f"shard-{shard}")
        if not os.access(path, os.W_OK | os.X_OK):
            raise InvalidArgumentError("the shard directory is not writable", path=path)
    if len(existing) < shards and not os.access(data_dir, os.W_OK | os.X_OK):
        raise InvalidArgumentError("the data directory is not writable", path=data_dir)
