"""Redis's FUNCTION commands: ``FUNCTION LOAD [REPLACE]``, ``DELETE``, ``FLUSH`` and
``RESTORE`` with Redis 7.0's semantics (``functions.c``), on a shard's libraries
(moonish.state.libraries, which also describes the message records that log each change).

An import runs each ``FUNCTION`` command on every shard. ``FUNCTION RESTORE`` decodes a
FUNCTION DUMP payload (moonish.redis.rdb.dump checks its footer).

moonish does not run Lua. It checks everything Redis checks before it compiles a library (the
``#!<engine> name=<library>`` shebang, the name, the engine, a library loaded twice), and
accepts a library Redis would refuse for its code (a compile error, no function registered, a
function name another library has). An AOF never holds a refused command, so imports are
unaffected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from moonish.errors import CommandError, UnsupportedFormatError
from moonish.log.records import Message
from moonish.redis.rdb.dump import FOOTER, verify_dump_payload
from moonish.redis.rdb.reader import OP_FUNCTION2, RdbCorruptionError, bytes_source
from moonish.state.commands import parse
from moonish.state.keyspace import Access
from moonish.state.libraries import PREFIX, Libraries, restore_libraries
from moonish.values.model import text

ENGINES = frozenset({"LUA"})
"""Engines Redis 7.0 registers (compared case-insensitively)."""
INVALID_NAME = (
    "ERR Library names can only contain letters, numbers, or underscores(_) and must be at "
    "least one character long"
)
_NAME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_C_SPACE = b" \t\n\v\f\r"  # isspace() in the C locale
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_HEX = frozenset(b"0123456789abcdefABCDEF")
_BACKSLASH, _DOUBLE, _SINGLE = ord("\\"), ord('"'), ord("'")


def split_args(line: bytes) -> list[bytes] | None:
    """Redis's ``sdssplitargs`` (``sds.c``): words separated by white space, ``"..."`` with
    ``\\xHH`` and ``\\n``-style escapes, ``'...'`` with ``\\'``; ``None`` for unbalanced
    quotes or a closing quote not followed by white space. Stops at a NUL byte, as C does."""
    line = line.split(b"\0", 1)[0] + b"\0"
    words: list[bytes] = []
    pos = 0
    while True:
        while line[pos] in _C_SPACE and line[pos]:
            pos += 1
        if not line[pos]:
            return words
        word = bytearray()
        quote = 0  # the open quote character, 0 outside quotes
        done = False
        while not done:
            char, after = line[pos], line[pos + 1] if line[pos] else 0
            if (
                quote == _DOUBLE
                and char == _BACKSLASH
                and after == ord("x")
                and line[pos + 2] in _HEX
                and line[pos + 3] in _HEX
            ):
                word.append(int(line[pos + 2 : pos + 4], 16))
                pos += 3
            elif quote == _DOUBLE and char == _BACKSLASH and after:
                pos += 1
                word.append(_ESCAPES.get(after, after))
            elif quote == _SINGLE and char == _BACKSLASH and after == _SINGLE:
                pos += 1
                word.append(_SINGLE)
            elif quote and char == quote:
                if after and after not in _C_SPACE:
                    return None  # a closing quote must be followed by a space or the end
                done = True
            elif quote and not char:
                return None  # unterminated quotes
            elif quote:
                word.append(char)
            elif char in b" \n\r\t\0":
                done = True
            elif char in (_DOUBLE, _SINGLE):
                quote = char
            else:
                word.append(char)
            if char:
                pos += 1
        words.append(bytes(word))


def _c_string(value: bytes) -> str:
    """``value`` as C's ``%s`` prints it: up to the first NUL byte."""
    return value.split(b"\0", 1)[0].decode(errors="replace")


def library_name(code: bytes) -> bytes:
    """The library name of ``code``'s ``#!<engine> name=<library>`` shebang, checked as Redis
    checks it before compiling (``functionExtractLibMetaData``, ``functionsVerifyName`` and
    the engine lookup in ``functionsCreateWithLibraryCtx``, functions.c).

    Raises:
        CommandError: Redis's error for a missing or malformed shebang, a missing, repeated
            or invalid name, an unknown metadata field or an unknown engine.
    """
    if not code.startswith(b"#!"):
        raise CommandError("ERR Missing library metadata")
    end = code.split(b"\0", 1)[0].find(b"\n")  # strchr: a NUL ends the C string
    if end < 0:
        raise CommandError("ERR Invalid library metadata")
    parts = split_args(code[:end])
    if not parts:
        raise CommandError("ERR Invalid library metadata")
    engine, name = parts[0][2:], None
    for part in parts[1:]:
        if part[:5].lower() == b"name=":
            if name is not None:
                raise CommandError(
                    "ERR Invalid metadata value, name argument was given multiple times"
                )
            name = part[5:]
            continue
        raise CommandError(f"ERR Invalid metadata value given: {_c_string(part)}")
    if name is None:
        raise CommandError("ERR Library name was not given")
    if not name or not set(name) <= _NAME_CHARS:
        raise CommandError(INVALID_NAME)
    if engine.decode(errors="replace").upper() not in ENGINES:
        raise CommandError(f"ERR Engine '{engine.decode(errors='replace')}' not found")
    return name


def _libraries_of(acc: Access) -> Libraries:
    if acc.libraries is None:
        raise UnsupportedFormatError("FUNCTION runs only on a shard writer's keyspace")
    libraries: Libraries = acc.libraries
    return libraries


def log(acc: Access, db: int, content: dict[str, Any]) -> None:
    """Queue the ``moonish.function`` message record of a FUNCTION command on ``acc``."""
    acc.messages.append(Message(PREFIX, orjson.dumps(content), db))


def cmd_function_load(acc: Access, db: int, argv: list[bytes]) -> Any:
    """``FUNCTION LOAD [REPLACE] <code>``: the library's name."""
    libraries = _libraries_of(acc)
    replace = False
    for option in argv[2:-1]:
        if _c_string(option).lower() != "replace":  # strcasecmp
            raise CommandError(f"ERR Unknown option given: {_c_string(option)}")
        replace = True
    code = argv[-1]
    name = library_name(code)
    if name in libraries and not replace:
        raise CommandError(f"ERR Library '{name.decode()}' already exists")
    libraries[name] = code
    log(
        acc,
        db,
        {"command": "load", "library": name.decode(), "code": text(code), "replace": replace},
    )
    return name


def cmd_function_delete(acc: Access, db: int, argv: list[bytes]) -> Any:
    """``FUNCTION DELETE <library>``."""
    libraries = _libraries_of(acc)
    if argv[2] not in libraries:
        raise CommandError("ERR Library not found")
    del libraries[argv[2]]
    log(acc, db, {"command": "delete", "library": text(argv[2])})
    return b"OK"


def subcommand_syntax_error(argv: list[bytes]) -> CommandError:
    """Redis's ``addReplySubcommandSyntaxError``."""
    return CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{_c_string(argv[1])[:128]}'"
        f". Try {argv[0].decode(errors='replace').upper()} HELP."
    )


def cmd_function_flush(acc: Access, db: int, argv: list[bytes]) -> Any:
    """``FUNCTION FLUSH [ASYNC|SYNC]``."""
    libraries = _libraries_of(acc)
    if len(argv) > 3:
        raise subcommand_syntax_error(argv)
    mode = argv[2].lower().decode(errors="replace") if len(argv) == 3 else None
    if mode not in (None, "sync", "async"):
        raise CommandError("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
    libraries.clear()
    log(acc, db, {"command": "flush", "mode": mode})
    return b"OK"


def decode_function_dump(payload: bytes) -> list[tuple[bytes, bytes]]:
    """The (library name, code) pairs of a verified FUNCTION DUMP payload, in payload order
    (``functionRestoreCommand``, and ``rdbFunctionLoad`` in rdb.c).

    Raises:
        CommandError: Redis's error: an item that is not a function, a code string that
            cannot be read, a bad shebang, or a library twice in the payload.
    """
    src = bytes_source(payload, "FUNCTION RESTORE payload")
    found: dict[bytes, bytes] = {}
    while len(payload) - src.offset > FOOTER.size:
        if src.byte() != OP_FUNCTION2:
            raise CommandError("ERR given type is not a function")
        try:
            code = src.string()
        except RdbCorruptionError:
            raise CommandError("ERR Failed loading library payload") from None
        name = library_name(code)
        if name in found:
            raise CommandError(f"ERR Library '{name.decode()}' already exists")
        found[name] = code
    return list(found.items())


POLICIES = {b"append": "append", b"replace": "replace", b"flush": "flush"}


def cmd_function_restore(acc: Access, db: int, argv: list[bytes]) -> Any:
    """``FUNCTION RESTORE <payload> [FLUSH|APPEND|REPLACE]``: the libraries of a FUNCTION DUMP
    payload, added with the policy (default APPEND)."""
    libraries = acc.libraries
    if libraries is None:
        raise UnsupportedFormatError("FUNCTION runs only on a shard writer's keyspace")
    if len(argv) > 4:
        raise subcommand_syntax_error(argv)
    policy = "append"
    if len(argv) == 4:
        chosen = POLICIES.get(argv[3].split(b"\0", 1)[0].lower())  # strcasecmp
        if chosen is None:
            raise CommandError(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."
            )
        policy = chosen
    verify_dump_payload(argv[2])
    restored = decode_function_dump(argv[2])
    restore_libraries(libraries, restored, policy)
    log(
        acc,
        db,
        {
            "command": "restore",
            "policy": policy,
            "libraries": [
                {"library": name.decode(), "code": text(code)} for name, code in restored
            ],
        },
    )
    return b"OK"


Handler = Callable[[Access, int, list[bytes]], Any]
SUBCOMMANDS: dict[bytes, tuple[Handler, int]] = {
    b"LOAD": (cmd_function_load, -3),
    b"DELETE": (cmd_function_delete, 3),
    b"FLUSH": (cmd_function_flush, -2),
    b"RESTORE": (cmd_function_restore, -3),
}
"""The FUNCTION subcommands that change the libraries (upper case) -> (handler, Redis's
arity)."""
READ_SUBCOMMANDS = frozenset({b"LIST", b"STATS", b"DUMP", b"KILL", b"HELP"})


def subcommand(argv: list[bytes]) -> Handler:
    """The handler of ``FUNCTION <subcommand> ...``, with Redis's arity checks.

    Raises:
        CommandError: no subcommand, an unknown one, or the wrong number of arguments.
        UnsupportedFormatError: a subcommand that is no write (``LIST``, ``DUMP``, ...).
    """
    parse.arity(argv, -2)
    name = argv[1].upper()
    found = SUBCOMMANDS.get(name)
    if found is None:
        if name in READ_SUBCOMMANDS:
            raise UnsupportedFormatError(
                f"FUNCTION {name.decode()} is not a write moonish implements"
            )
        raise CommandError(
            f"ERR unknown subcommand '{_c_string(argv[1])[:128]}'. Try "
            f"{argv[0].decode(errors='replace').upper()} HELP."
        )
    handler, arity = found
    if (arity > 0 and len(argv) != arity) or len(argv) < -arity:
        raise CommandError(
            f"ERR wrong number of arguments for 'function|{name.decode().lower()}' command"
        )
    return handler


def cmd_function(acc: Access, db: int, argv: list[bytes]) -> Any:
    """``FUNCTION LOAD|DELETE|FLUSH|RESTORE ...`` (see :func:`subcommand`)."""
    return subcommand(argv)(acc, db, argv)
