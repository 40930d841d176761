"""A cluster's function libraries in one capture: every master keeps its own libraries
(Redis ``functions.c``; ``FUNCTION LOAD`` is run on each master, e.g. ``redis-cli --cluster
call``), while every moonish shard holds one set, which every link's ``FUNCTION`` commands
reach (moonish.redis.routing.commands). So the second master's ``FUNCTION LOAD`` of a library
the first already loaded would fail in moonish though it succeeded on its node.

moonish holds the union of the masters' libraries: before a link's ``FUNCTION`` command is
applied (moonish.redis.cluster.order, alone in its chunk, after everything before it), it is
made to do on moonish's libraries what it did on its node:

- ``LOAD`` without ``REPLACE`` of a library held with the same code: no change (another
  master loaded it first); with other code: ``LOAD REPLACE`` (the nodes' libraries differ;
  the latest load wins, and the caller is told).
- ``DELETE`` of a library not held (another master's ``DELETE`` came first): no change.
- ``FLUSH`` with no library held: no change.
- ``RESTORE`` with the ``APPEND`` policy (the default): ``REPLACE`` (a library in the payload
  may be held already, from another master).

Everything else (``REPLACE`` loads, a ``DELETE`` of a held library, a ``FLUSH`` of some) is
applied as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from moonish.errors import CommandError
from moonish.state.commands.functions import library_name

FUNCTION = b"FUNCTION"


def reconcile(
    argv: list[bytes], libraries: Mapping[bytes, bytes]
) -> tuple[list[bytes], bytes | None]:
    """``argv`` (a ``FUNCTION`` command of one master's stream) as it applies to
    ``libraries`` (moonish's, name → code), and the name of the library it replaces with
    other code (``None`` when it replaces none); an empty ``argv`` changes nothing.

    A command that does not parse is returned as it is (applying it raises Redis's error).
    """
    sub = argv[1].upper() if len(argv) > 1 else b""
    if sub == b"LOAD" and len(argv) == 3:
        try:
            name = library_name(argv[2])
        except CommandError:
            return argv, None
        held = libraries.get(name)
        if held is None:
            return argv, None
        if held == argv[2]:
            return [], None
        return [FUNCTION, b"LOAD", b"REPLACE", argv[2]], name
    if sub == b"DELETE" and len(argv) == 3 and argv[2] not in libraries:
        return [], None
    if sub == b"FLUSH" and not libraries:
        return [], None
    if sub == b"RESTORE" and (len(argv) == 3 or (len(argv) == 4 and argv[3].upper() == b"APPEND")):
        return [FUNCTION, b"RESTORE", argv[2], b"REPLACE"], None
    return argv, None
