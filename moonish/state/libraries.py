"""A shard's Redis function libraries, and the ``moonish.function`` message records that log
their changes (the commands that change them: moonish.state.commands.functions).

Functions are server-wide, not key changes: every shard of a data directory keeps the whole
library set (:class:`Libraries`, library name -> code). Each FUNCTION command that changes it
appends one message record (moonish.log.records ``Message``) with prefix :data:`PREFIX` and
UTF-8 JSON content, one object per command::

    {"command": "load", "library": <name>, "code": <text>, "replace": <bool>}
    {"command": "delete", "library": <name>}
    {"command": "flush", "mode": "sync"|"async"|null}
    {"command": "restore", "policy": "append"|"replace"|"flush",
     "libraries": [{"library": <name>, "code": <text>}, ...]}

``<text>`` is a JSON string when the code is UTF-8, else ``{"_b64": "<base64>"}``; a library
name is always ASCII (letters, digits, ``_``). The writer replays these records on recovery
(:func:`apply_message`); FUNCTION RESTORE's record holds the libraries its payload decoded to,
so replay needs no RDB decoder. Snapshots hold the libraries as lines
(:func:`library_lines`).
"""

from __future__ import annotations

import orjson

from moonish.errors import CommandError
from moonish.values.model import text, untext

PREFIX = "moonish.function"
"""The prefix of the message records of FUNCTION commands."""


class Libraries(dict[bytes, bytes]):
    """A shard's function libraries: library name -> code (the whole code, shebang included,
    as ``FUNCTION LIST WITHCODE`` shows it), in load order."""


def restore_libraries(
    libraries: Libraries, restored: list[tuple[bytes, bytes]], policy: str
) -> None:
    """Add ``restored`` (name, code) pairs to ``libraries`` with a FUNCTION RESTORE policy
    (``functionRestoreCommand`` and ``libraryJoin``, functions.c): ``flush`` replaces the whole
    set, ``replace`` replaces libraries of the same name, ``append`` refuses them.

    Raises:
        CommandError: ``append`` and a library of that name exists (nothing changed).
    """
    if policy == "append":
        for name, _ in restored:
            if name in libraries:
                raise CommandError(f"ERR Library {name.decode()} already exists")
    elif policy == "flush":
        libraries.clear()
    libraries.update(restored)


def apply_message(libraries: Libraries, content: bytes) -> None:
    """Replay a ``moonish.function`` record's content on ``libraries`` (recovery).

    Raises:
        ValueError, KeyError, TypeError: the content is not one of the module's objects.
        CommandError: it does not apply to ``libraries`` (the log is inconsistent).
    """
    change = orjson.loads(content)
    command = change["command"]
    if command == "load":
        libraries[untext(change["library"])] = untext(change["code"])
    elif command == "delete":
        del libraries[untext(change["library"])]
    elif command == "flush":
        libraries.clear()
    elif command == "restore":
        restored = [(untext(lib["library"]), untext(lib["code"])) for lib in change["libraries"]]
        restore_libraries(libraries, restored, change["policy"])
    else:
        raise ValueError(f"unknown function change {command!r}")


def library_lines(libraries: Libraries) -> list[bytes]:
    """The libraries as snapshot lines, by name: ``{"library": <name>, "code": <text>}``."""
    return [
        orjson.dumps({"library": text(name), "code": text(libraries[name])})
        for name in sorted(libraries)
    ]


def libraries_from_lines(lines: list[bytes]) -> Libraries:
    """The inverse of :func:`library_lines`.

    Raises:
        ValueError, KeyError, TypeError: a line is not a library line.
    """
    libraries = Libraries()
    for line in lines:
        item = orjson.loads(line)
        libraries[untext(item["library"])] = untext(item["code"])
    return libraries
