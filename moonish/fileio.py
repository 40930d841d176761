"""Writing a file so that it appears complete or not at all (temporary name, fsync, rename,
fsync of the directory), and small JSON files that carry their own checksum."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import crc32c
import orjson

from moonish.errors import CorruptionError, InvalidArgumentError, UnsupportedFormatError

DEFAULT_NAME_MAX_BYTES = 255
"""A name's limit where the file system does not say (Linux's ext4, XFS, btrfs: 255 bytes)."""


def check_path_names(path: str | os.PathLike[str], what: str = "path") -> str:
    """``path`` as a string, once every name in it fits the file system that would hold it:
    at most ``NAME_MAX`` bytes per name (255 on Linux's file systems, ``pathconf`` of the
    nearest existing directory) and ``PATH_MAX`` bytes in all. A directory a command will
    create is checked before anything is created.

    Raises:
        InvalidArgumentError: a name or the whole path is too long (``what`` names the
            argument in the message).
    """
    text = os.fspath(path)
    absolute = os.path.abspath(text)
    existing = absolute
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    name_max = _pathconf(existing, "PC_NAME_MAX", DEFAULT_NAME_MAX_BYTES)
    path_max = _pathconf(existing, "PC_PATH_MAX", 4096)
    for name in absolute.split(os.sep):
        size = len(os.fsencode(name))
        if size > name_max:
            raise InvalidArgumentError(
                f"the {what} holds a name of {size} bytes; the file system takes at most "
                f"{name_max}: {name[:40]}...",
                path=text,
            )
    if len(os.fsencode(absolute)) >= path_max:
        raise InvalidArgumentError(
            f"the {what} is {len(os.fsencode(absolute))} bytes long; the file system takes "
            f"less than {path_max}",
            path=text,
        )
    return text


def _pathconf(path: str, name: str, default: int) -> int:
    try:
        return os.pathconf(path, name)
    except (OSError, ValueError):
        return default


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(path: str) -> None:
    """Make a rename or a new file in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: str, chunks: Iterable[bytes]) -> int:
    """Write ``chunks`` to ``path`` through ``.<name>.tmp`` in the same directory; returns
    the bytes written. A crash leaves either the old file or the new one (and maybe a
    stray ``.tmp``, which the next call overwrites)."""
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.tmp")
    written = 0
    with open(temporary, "wb") as out:
        for chunk in chunks:
            out.write(chunk)
            written += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    fsync_dir(directory or ".")
    return written


CHECKSUM_MARK = b',\n  "crc32c": '


def dump_checked(document: dict[str, object]) -> bytes:
    """``document`` as indented JSON whose last member is ``"crc32c"``: the crc32c of every
    byte of the file before ``,\\n  "crc32c": `` (so a flipped byte anywhere is caught, white
    space included). ``document`` must be a non-empty object without a ``crc32c`` member."""
    body = orjson.dumps(document, option=orjson.OPT_INDENT_2)[:-2]  # without "\n}"
    return body + CHECKSUM_MARK + b"%d\n}\n" % crc32c.crc32c(body)


def read_checked(path: str, form: str, version: int) -> dict[str, Any] | None:
    """The members of the :func:`dump_checked` document at ``path`` (``None`` when there is
    no such file), which must say ``"format": form`` and ``"version": version``.

    Raises:
        CorruptionError: as :func:`load_checked`.
        UnsupportedFormatError: another format, or a version this build does not read.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    document = load_checked(data, path)
    if document.get("format") != form or document.get("version") != version:
        raise UnsupportedFormatError(
            f"not {form} version {version}: {document.get('format')!r} version "
            f"{document.get('version')!r}",
            path=path,
        )
    return document


def load_checked(data: bytes, path: str) -> dict[str, Any]:
    """The members of a document written by :func:`dump_checked`, ``crc32c`` removed.

    Raises:
        CorruptionError: not JSON, no checksum, or a checksum that does not match (``path``
            and the byte offset of the checksum in the error).
    """
    mark = data.rfind(CHECKSUM_MARK)
    try:
        document = orjson.loads(data)
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        stored = document.pop("crc32c")
    except (orjson.JSONDecodeError, KeyError, ValueError) as error:
        raise CorruptionError(f"unreadable checked file: {error}", path=path, offset=0) from None
    if (
        mark < 0
        or not isinstance(stored, int)
        or data[mark:] != CHECKSUM_MARK + b"%d\n}\n" % stored  # every byte is checked
        or stored != crc32c.crc32c(data[:mark])
    ):
        raise CorruptionError("file checksum mismatch", path=path, offset=max(mark, 0))
    return document
