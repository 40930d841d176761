"""Running Redis write commands on a keyspace: the command table and key positions.

The table covers the write commands listed in docs/images.md ("Commands"), one module of this
package per family; anything else is refused with :class:`UnsupportedFormatError`, so nothing
is ever half understood.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from moonish.errors import CommandError, UnsupportedFormatError
from moonish.state.commands import (
    bits,
    functions,
    geo,
    hash_getset,
    hash_set_list,
    hash_ttl,
    hyperloglog,
    keys,
    restore,
    sort,
    sorted_sets,
    stream_groups,
    streams,
    strings,
)
from moonish.state.keyspace import Access

Handler = Callable[[Access, int, list[bytes]], Any]

COMMANDS: dict[bytes, tuple[Handler, Any]] = {
    **strings.COMMANDS,
    **keys.COMMANDS,
    **hash_set_list.COMMANDS,
    **hash_ttl.COMMANDS,
    **hash_getset.COMMANDS,
    **sorted_sets.COMMANDS,
    **streams.COMMANDS,
    **stream_groups.COMMANDS,
    **bits.COMMANDS,
    **sort.COMMANDS,
    **hyperloglog.COMMANDS,
    **geo.COMMANDS,
    **restore.COMMANDS,
    b"FUNCTION": (functions.cmd_function, []),
}
"""Upper-case name -> (handler, key positions: argv indexes, ``"all"``, ``"pairs"``, or a
function of argv giving the indexes, for commands whose keys depend on their arguments:
``BITOP op dest src...``, ``ZUNIONSTORE dest numkeys src...``)."""


SCRIPTS: Final = frozenset({b"EVAL", b"EVALSHA", b"EVAL_RO", b"EVALSHA_RO", b"FCALL", b"FCALL_RO"})
"""Commands that run scripts: Redis 7 never propagates them (it propagates a script's writes,
in MULTI/EXEC), and moonish does not run Lua."""


def _lookup(argv: list[bytes]) -> tuple[Handler, Any]:
    if not argv:
        raise CommandError("ERR empty command")
    found = COMMANDS.get(argv[0])  # names are mostly upper case already (no copy then)
    if found is None:
        found = COMMANDS.get(argv[0].upper())
    if found is None:
        name = argv[0].decode(errors="replace")
        if argv[0].upper() in SCRIPTS:
            raise UnsupportedFormatError(
                f"{name} never appears in a Redis 7 AOF or replication stream: Redis "
                "propagates a script's writes (in MULTI/EXEC), not the script, and moonish "
                "does not run scripts; this input was written by an older Redis or by hand"
            )
        raise UnsupportedFormatError(
            f"moonish does not implement the Redis command {name!r} (docs/images.md lists "
            "the write commands it tracks)"
        )
    return found


def keys_of(argv: list[bytes]) -> list[bytes]:
    """The keys ``argv`` names, in argv order (empty for FLUSHDB/FLUSHALL).

    Raises:
        UnsupportedFormatError: not a command moonish implements.
    """
    _, positions = _lookup(argv)
    if positions == "all":
        return argv[1:]
    if positions == "pairs":
        return argv[1::2]
    if callable(positions):
        positions = positions(argv)
    return [argv[i] for i in positions if i < len(argv)]


def execute(acc: Access, db: int, argv: list[bytes]) -> Any:
    """Run one write command on ``acc``; returns its reply (as Redis would, in Python
    values: bytes, int, float, list or ``None``).

    Raises:
        CommandError: Redis would reject the command; nothing was changed.
        UnsupportedFormatError: not a command moonish implements.
    """
    handler, _ = _lookup(argv)
    return handler(acc, db, argv)
