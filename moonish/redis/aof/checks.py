"""Checks an AOF import makes before it creates anything (moonish.redis.aof.importer): the
manifest and the files it lists, then the target data directory and the open-file limit
(moonish.redis.routing.target).
"""

from __future__ import annotations

import os

from moonish.errors import InvalidArgumentError, UnsupportedFormatError
from moonish.redis.aof.files import read_manifest, starts_with_rdb
from moonish.redis.routing.target import (
    check_data_dir,
    check_descriptors,
    check_shard_count,
    check_shard_range,
)


def check_import(
    appendonlydir: str | os.PathLike[str], data_dir: str | os.PathLike[str], shards: int
) -> list[str]:
    """Every check :func:`import_aof` makes before it creates anything; creates nothing.

    Returns:
        The paths of the AOF files to replay, in replay order.

    Raises:
        InvalidArgumentError: a shard count out of range; a missing or malformed manifest, or
            a file it lists that is missing or unreadable; a data directory that is a file, a
            shard directory, inside a shard directory, the AOF directory or inside it, or that
            holds other shards than ``shard-0..shard-<shards-1>``; a directory that would have
            to be created in a place that is not writable; a hard open-file limit
            (``RLIMIT_NOFILE``) below what ``shards`` writers need (see
            :func:`descriptors_needed`).
        UnsupportedFormatError: an incremental AOF file that is an RDB file.
    """
    aof_dir, out_dir = os.fspath(appendonlydir), os.fspath(data_dir)
    check_shard_range(shards)
    paths = _aof_paths(aof_dir)
    check_data_dir(aof_dir, out_dir)
    check_shard_count(out_dir, shards)
    check_descriptors(shards, raise_soft=False)
    return paths


def _aof_paths(aof_dir: str) -> list[str]:
    """The manifest's files as paths, each checked to be a readable file; only the base file
    may be an RDB file (``aof-use-rdb-preamble yes``), as in Redis's loader."""
    paths = []
    for aof_file in read_manifest(aof_dir):
        name = aof_file.name
        if name in ("", ".", "..") or os.path.basename(name) != name:
            raise InvalidArgumentError(
                f"the manifest lists {name!r}, which is not a file name", path=aof_dir
            )
        path = os.path.join(aof_dir, name)
        if not os.path.isfile(path):
            raise InvalidArgumentError(
                "an AOF file listed in the manifest is missing or not a file", path=path
            )
        try:
            is_rdb = starts_with_rdb(path)
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read AOF file: {exc.strerror}", path=path) from None
        if is_rdb and aof_file.type != "b":
            raise UnsupportedFormatError(
                "an incremental AOF file starts with an RDB header; only the base file may "
                "be an RDB file",
                path=path,
                offset=0,
            )
        paths.append(path)
    return paths
