"""Which arguments of a Redis write command are keys, and how a command becomes records.

Every moonish kv record is about one key. A command that touches several keys becomes one
record per key, written as an atomic batch (per shard):

- every argument a key (``DEL k1 k2``, ``UNLINK``): one record per key, ``DEL k1``, ``DEL k2``;
- key/value pairs (``MSET k1 v1 k2 v2``, ``MSETNX``): one record per pair, ``MSET k1 v1``;
- source and destination (``RENAME a b``, ``COPY``, ``SMOVE``, ``LMOVE``, ``RPOPLPUSH``,
  ``BLMOVE``, ``BRPOPLPUSH``): the whole command twice, once about each key (``key_pos`` 1, 2);
- ``FLUSHDB`` / ``FLUSHALL`` / ``SWAPDB`` / ``FUNCTION``: no key; every shard gets the record
  (function libraries are server-wide: every shard keeps them all).
- otherwise the key is the first argument (``BITOP op dest ...``: the destination, argv[2];
  ``XGROUP sub key ...``: argv[2]).

Key positions follow the key specs in Redis's command table (``COMMAND INFO``) for the commands
Redis writes to its append-only file.
"""

from __future__ import annotations

from typing import Final

from moonish.errors import UnsupportedFormatError

ALL_KEYS: Final = frozenset({b"DEL", b"UNLINK"})
KEY_VALUE_PAIRS: Final = frozenset({b"MSET", b"MSETNX"})
SOURCE_AND_DESTINATION: Final = frozenset(
    {b"RENAME", b"RENAMENX", b"COPY", b"SMOVE", b"LMOVE", b"RPOPLPUSH", b"BLMOVE", b"BRPOPLPUSH"}
)
KEY_AT_2: Final = frozenset({b"BITOP", b"XGROUP"})
KEYLESS: Final = frozenset({b"FLUSHDB", b"FLUSHALL", b"SWAPDB", b"FUNCTION"})
"""Commands without a key that every shard runs."""
NOT_WRITES: Final = frozenset({b"MULTI", b"EXEC", b"DISCARD", b"SELECT"})
NOT_ROUTABLE: Final = frozenset(
    {
        b"SCRIPT",
        b"EVAL",
        b"EVALSHA",
        b"EVAL_RO",
        b"EVALSHA_RO",
        b"FCALL",
        b"FCALL_RO",
        b"PUBLISH",
        b"SPUBLISH",
    }
)
"""Commands whose first argument is not a key: they cannot be routed to one shard."""

Part = tuple[bytes | None, tuple[bytes, ...], int]
"""(key or None, argv of the record, key_pos)."""


def split_command(
    argv: list[bytes] | tuple[bytes, ...], *, path: str | None = None, offset: int | None = None
) -> list[Part]:
    """The records a write command becomes: ``(key, argv, key_pos)`` per affected key.

    Args:
        argv: the command.
        path, offset: where the command was read (an AOF file and its byte offset), named
            in the error.

    Raises:
        UnsupportedFormatError: a keyless command other than FLUSHDB/FLUSHALL/SWAPDB/FUNCTION
            (SCRIPT, EVAL, ...), or a command whose arguments do not fit its key layout.
    """
    command = argv[0].upper()
    args = tuple(argv)
    if command in ALL_KEYS and len(args) >= 2:
        return [(key, (args[0], key), 1) for key in args[1:]]
    if command in KEY_VALUE_PAIRS and len(args) >= 3 and len(args) % 2 == 1:
        return [(args[i], (args[0], args[i], args[i + 1]), 1) for i in range(1, len(args), 2)]
    if command in SOURCE_AND_DESTINATION and len(args) >= 3:
        return [(args[1], args, 1), (args[2], args, 2)]
    if command in KEY_AT_2 and len(args) >= 3:
        return [(args[2], args, 2)]
    if command in KEYLESS:
        return [(None, args, 0)]
    if len(args) >= 2 and command not in NOT_WRITES and command not in NOT_ROUTABLE:
        return [(args[1], args, 1)]
    raise UnsupportedFormatError(
        f"cannot import {command.decode(errors='replace')} with {len(args) - 1} argument(s): "
        "moonish routes records by key and this command has none it can route",
        path=path,
        offset=offset,
    )
