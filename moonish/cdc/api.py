"""The in-process read API over one shard or a whole data directory.

- ``read(path, position, limit)``: one batch. For a shard directory and an LSN cursor, Moon's
  ``CDC.READ`` contract (``moonish.cdc.shard_read.read``, returns a ``ReadResult`` with a
  ``cursor``). For a data directory, a token, ``earliest``/``now``, or a named consumer: the
  merged stream of every shard (``moonish.cdc.merged_read.read_merged``, returns a
  ``MergedResult`` with a ``token``).
- ``tail(path, position, follow=...)``: the same as an iterator (``Tail`` or ``MergedTail``).
- ``ack(data_dir, consumer, token)``: confirm what a named consumer has processed.

Example::

    import moonish

    result = moonish.read("data", "earliest", limit=100)      # every shard, merged
    for event in result.events:
        print(event.shard, event.lsn, event.op)
    more = moonish.read("data", result.token)

    moonish.consumers.create("data", "billing", (0, 0, 0, 0))
    batch = moonish.read("data", consumer="billing")
    moonish.ack("data", "billing", batch.token)              # at-least-once: after processing
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from moonish.cdc.cursor import Cursor
from moonish.cdc.positions import data_shards, is_data_dir, resolve
from moonish.cdc.shard_read import DEFAULT_LIMIT, ReadResult, Tail
from moonish.cdc.shard_read import read as read_shard
from moonish.cdc.token import EARLIEST, NOW, VERSION, Token
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import InvalidArgumentError

if TYPE_CHECKING:  # imported where used: a shard's read needs no merging and no consumers
    from moonish.cdc.merged_read import MergedResult, MergedTail
    from moonish.datadir.consumers import Consumer

Position = int | Cursor | Token | str | None
"""An LSN or cursor (one shard), or a token, its text, ``earliest`` or ``now`` (merged)."""


def merged(path: str | os.PathLike[str], position: Position, consumer: str | None) -> bool:
    """Whether a read of ``path`` from ``position`` is a merged read (a data directory, a
    token, ``earliest``/``now``, or a consumer) rather than one shard's cursor read."""
    if consumer is not None or isinstance(position, Token) or is_data_dir(path):
        return True
    if isinstance(position, str):
        text = position.strip()
        return text in (EARLIEST, NOW) or (text[:1] == VERSION and text[1:2].isdigit())
    return False


def _cursor(position: Position) -> Cursor:
    if position is None:
        return Cursor(0)
    if isinstance(position, Cursor):
        return position
    if isinstance(position, int):
        return Cursor(position)
    return Cursor.parse(str(position))


def read(
    path: str | os.PathLike[str],
    position: Position = None,
    limit: int = DEFAULT_LIMIT,
    *,
    consumer: str | None = None,
    name: str = "moonish",
    clock: Clock = SYSTEM_CLOCK,
    snapshot: bool = False,
    transactions: bool = False,
    messages: bool = False,
) -> ReadResult | MergedResult:
    """One batch of events after ``position`` (see the module docstring for which read).

    Raises:
        InvalidArgumentError: as the read chosen; ``snapshot`` with a merged read.
        LsnNotRetainedError, PositionNotRetainedError, ConsumerLostError, CorruptionError:
            as :func:`moonish.cdc.shard_read.read` and
            :func:`moonish.cdc.merged_read.read_merged`.
    """
    if merged(path, position, consumer):
        if snapshot:
            raise InvalidArgumentError(
                "--snapshot starts one shard's consumer at its snapshot; read a shard directory",
                path=os.fspath(path),
            )
        from moonish.cdc.merged_read import read_merged

        where = position if isinstance(position, Token) or position is None else str(position)
        return read_merged(
            path,
            where,
            limit,
            consumer=consumer,
            name=name,
            clock=clock,
            transactions=transactions,
            messages=messages,
        )
    return read_shard(
        path,
        _cursor(position),
        limit,
        name=name,
        clock=clock,
        snapshot=snapshot,
        transactions=transactions,
        messages=messages,
    )


def tail(
    path: str | os.PathLike[str],
    position: Position = None,
    *,
    from_lsn: int | Cursor | None = None,
    consumer: str | None = None,
    follow: bool = False,
    name: str = "moonish",
    clock: Clock = SYSTEM_CLOCK,
    fallback_poll_ms: int = 1000,
    watch: bool = True,
    snapshot: bool = False,
    transactions: bool = False,
    resolved_ms: int | None = None,
    messages: bool = False,
) -> Tail | MergedTail:
    """An iterator of events after ``position``: :class:`~moonish.cdc.shard_read.Tail` for a
    shard's cursor, :class:`~moonish.cdc.merged_read.MergedTail` for a merged read (which
    alone carries ``resolved_ms`` markers). Use as a context manager. ``from_lsn`` is another
    name of a shard cursor's ``position`` (the two are one argument).

    Raises:
        InvalidArgumentError: as the iterator chosen; ``snapshot`` with a merged read,
            ``resolved_ms`` with a shard cursor.
    """
    if from_lsn is not None:
        if position is not None:
            raise InvalidArgumentError("give position or from_lsn, not both")
        position = from_lsn
    if merged(path, position, consumer) or resolved_ms is not None:
        if snapshot:
            raise InvalidArgumentError(
                "snapshot starts one shard's consumer; tail a shard directory",
                path=os.fspath(path),
            )
        if isinstance(position, int | Cursor) and not isinstance(position, bool):
            raise InvalidArgumentError(
                "a merged stream starts from a token, earliest or now, not an LSN"
            )
        from moonish.cdc.merged_read import MergedTail

        where = position if isinstance(position, Token) or position is None else str(position)
        return MergedTail(
            path,
            where,
            consumer=consumer,
            follow=follow,
            name=name,
            clock=clock,
            fallback_poll_ms=fallback_poll_ms,
            watch=watch,
            transactions=transactions,
            resolved_ms=resolved_ms,
            messages=messages,
        )
    return Tail(
        path,
        _cursor(position),
        follow=follow,
        name=name,
        clock=clock,
        fallback_poll_ms=fallback_poll_ms,
        watch=watch,
        snapshot=snapshot,
        transactions=transactions,
        messages=messages,
    )


def ack(data_dir: str | os.PathLike[str], consumer: str, token: Token | str) -> Consumer:
    """Confirm that ``consumer`` has processed everything up to ``token`` (positions only
    move forward); returns the stored consumer.

    Raises:
        ConsumerNotFoundError, ConsumerLostError, InvalidArgumentError: as
            :func:`moonish.datadir.consumers.ack` (a token of another shard count is refused).
    """
    shards = data_shards(data_dir)
    position = token if isinstance(token, Token) else resolve(shards, token)
    from moonish.datadir import consumers

    return consumers.ack(os.fspath(data_dir), consumer, position.positions)
