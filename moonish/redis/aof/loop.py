"""The per-command loop of an AOF import (moonish.redis.aof.replay): one file's commands, with
``SELECT``, ``MULTI``/``EXEC`` and the shards' resume points, handed to the router.

It is here, apart from the replay, because it is compiled with mypyc (docs/build.md) and the
replay is not (a parallel import pickles its classes): it runs once per command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from moonish.redis.aof.files import AofFormatError
from moonish.redis.routing.router import Entry, Router, selected_db
from moonish.redis.routing.sources import encode_position

Resume = tuple[int, int]
"""Where a shard stands in the manifest's files: (file index, byte offset); (-1, 0): nowhere."""

CONTROL: Final = frozenset({b"SELECT", b"MULTI", b"EXEC"})

PROGRESS_BYTES: Final = 1 << 16
"""The progress callback is called at most once per this many bytes of AOF read."""


class FileReplay:
    """Replays the commands of one AOF file (``path``, ``index`` in the manifest's order,
    ``name`` its base name) on the shards whose ``resume`` point is before each command's end.

    After :meth:`run`: ``transactions`` holds how many MULTI/EXEC blocks were applied,
    ``transaction`` the commands of a MULTI left unfinished at the end (``None`` if none) and
    ``transaction_offset`` where it starts, ``done`` how many bytes ``progress`` was told of.
    """

    def __init__(
        self,
        router: Router,
        resume: list[Resume],
        index: int,
        path: str,
        name: str,
        progress: Callable[[int], None] | None,
    ) -> None:
        self.router, self.resume, self.index = router, resume, index
        self.path, self.progress = path, progress
        self.prefix = encode_position({"aof": name, "offset": 0})[: -len(b"0}")]
        self.fixed = [point[0] > index for point in resume]  # past the file, or before it
        self.varying = [shard for shard, point in enumerate(resume) if point[0] == index]
        self.control: dict[bytes, bool] = {}  # command name as written -> SELECT/MULTI/EXEC?
        self.transactions = 0
        self.transaction: list[Entry] | None = None
        self.transaction_offset = 0
        self.done = 0

    def run(self, spans: Iterator[tuple[int, int, list[bytes]]]) -> None:
        """Apply the commands ``spans`` yields (moonish.redis.aof.files ``AofCommands.spans``).

        Raises:
            AofFormatError: a bad SELECT, MULTI inside MULTI, EXEC without MULTI (path and
                offset named); and what :meth:`Router.apply` raises.
        """
        router, path, progress = self.router, self.path, self.progress
        db = 0
        transaction = self.transaction
        for offset, end, argv in spans:
            if progress is not None and offset - self.done >= PROGRESS_BYTES:
                progress(offset - self.done)
                self.done = offset
            name = argv[0]
            control = self.control.get(name)  # per name as written: no upper-casing per command
            if control is None:
                control = self.control[name] = name.upper() in CONTROL
            if not control:
                if transaction is not None:
                    transaction.append((db, argv, offset))
                elif self.due(end):
                    router.apply_one(db, argv, offset, path)
            elif (command := name.upper()) == b"SELECT":
                selected = selected_db(argv)
                if selected is None:
                    raise AofFormatError(f"bad SELECT {argv[1:]!r}", path=path, offset=offset)
                db = selected
            elif command == b"MULTI":
                if transaction is not None:
                    raise AofFormatError("MULTI inside MULTI", path=path, offset=offset)
                transaction, self.transaction_offset = [], offset
                self.transaction = transaction
            else:  # EXEC
                if transaction is None:
                    raise AofFormatError("EXEC without MULTI", path=path, offset=offset)
                if self.due(end):
                    router.apply(transaction, True, path)
                    self.transactions += 1
                transaction = self.transaction = None

    def due(self, end: int) -> bool:
        """Set the router's position to ``end`` of the file (the stored form of
        ``encode_position({"aof": name, "offset": end})``) and its skips; whether any shard
        still has to apply the command that ends there."""
        router = self.router
        router.position = b"%s%d}" % (self.prefix, end)  # (one bytes object made, not two)
        if not self.varying:  # some shard is before the file (the replay checked)
            router.skip = self.fixed
            return True
        skip = self.fixed.copy()
        point = (self.index, end)
        for shard in self.varying:
            skip[shard] = self.resume[shard] >= point
        router.skip = skip
        return not all(skip)
