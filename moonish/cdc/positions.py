"""A data directory's shards and the tokens ``earliest`` and ``now``.

A data directory holds ``shard-<k>`` directories numbered from 0 (``moonish wal import-aof
--shards N`` makes them); a single shard directory given where a data directory is expected
is a data directory of one shard. Component ``k`` of a token is shard ``k``.
"""

from __future__ import annotations

import os

from moonish.cdc.token import EARLIEST, NOW, Token
from moonish.datadir.layout import shard_dirs
from moonish.log.control import load_control, log_floor
from moonish.log.reader import ShardReader
from moonish.log.segment import list_segments


def data_shards(data_dir: str | os.PathLike[str]) -> list[str]:
    """The shard directories of ``data_dir`` in token order (shard 0 first); ``[data_dir]``
    when it is itself a shard directory (``moonish.datadir.layout.shard_dirs``).

    Raises:
        InvalidArgumentError: not an existing directory; shard numbers that do not run
            0..N-1; a shard directory without a log.
    """
    return shard_dirs(data_dir)


def is_data_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds ``shard-<k>`` directories (rather than being a shard)."""
    root = os.fspath(path)
    return os.path.isdir(root) and any(name.startswith("shard-") for name in os.listdir(root))


def latest_lsn(shard_dir: str) -> int:
    """The LSN of the shard's last committed record (0 when it has none): ``next_lsn - 1``.

    Raises:
        CorruptionError: the newest segment's checked part is damaged.
    """
    reader = ShardReader(shard_dir)
    try:
        reader.seek_end()
        return reader.next_lsn - 1
    finally:
        reader.close()


def oldest_position(shard_dir: str) -> int:
    """The position before the oldest record the shard still holds (``oldest LSN - 1``), or
    its end when it holds none; a token with this component reads everything retained."""
    bases = list_segments(shard_dir)
    if bases:
        return bases[0] - 1
    return log_floor(shard_dir, load_control(shard_dir)) - 1


def earliest(shards: list[str]) -> Token:
    """The token before the oldest retained record of every shard."""
    return Token(tuple(oldest_position(shard) for shard in shards))


def now(shards: list[str]) -> Token:
    """The token after the last committed record of every shard (only later changes)."""
    return Token(tuple(latest_lsn(shard) for shard in shards))


def resolve(shards: list[str], text: str) -> Token:
    """``earliest``, ``now`` or a token's text, as a token for these shards.

    Raises:
        InvalidArgumentError: malformed text, or a token of another shard count.
    """
    stripped = text.strip()
    if stripped == EARLIEST:
        return earliest(shards)
    if stripped == NOW:
        return now(shards)
    return Token.parse(stripped, len(shards))
