"""One exception root for moonish, with kinds named by what the caller should do.

Every error carries its context as fields (``path``, ``offset`` in bytes, ``lsn``) so callers and
the CLI can act on it without parsing messages:

- :class:`InvalidArgumentError`: the request is wrong (bad LSN, limit, not a WAL directory). Fix
  the call; retrying it unchanged fails again.
- :class:`LsnNotRetainedError`: the requested LSN was removed by retention; ``oldest_lsn`` says
  where the log starts now. Resume from there (accepting the gap) or from a snapshot.
- :class:`CorruptionError`: stored bytes are damaged (bad CRC followed by valid data, a bad
  segment header, a broken LSN sequence). Nothing is skipped; an operator must look.
- :class:`UnsupportedFormatError`: the bytes are well formed but of a version or kind this build
  cannot read (a newer segment version, an RDB-preamble AOF).
- :class:`UnavailableError`: temporarily unavailable, for example another writer holds the shard.
  Retry later.
"""

from __future__ import annotations

import os
from typing import Any


class MoonishError(Exception):
    """Root of every error moonish raises on purpose.

    Attributes:
        path: file or directory the error is about, or ``None``.
        offset: byte offset inside ``path``, or ``None``.
        lsn: log sequence number involved, or ``None``.
    """

    kind = "error"

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        offset: int | None = None,
        lsn: int | None = None,
    ) -> None:
        self.message = message
        self.path = os.fspath(path) if path is not None else None
        self.offset = offset
        self.lsn = lsn
        super().__init__(self._render())

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled whole, whatever its class's ``__init__`` takes (an error a worker process
        sends: moonish.redis.capture.workers, moonish.redis.aof.parallel,
        moonish.redis.rdbimport.parallel)."""
        return _rebuild, (type(self), self.args, self.__dict__)

    def _render(self) -> str:
        where = []
        if self.path is not None:
            where.append(self.path)
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        if self.lsn is not None:
            where.append(f"LSN {self.lsn}")
        return f"{self.message} ({', '.join(where)})" if where else self.message


def _rebuild(cls: type[MoonishError], args: tuple[Any, ...], state: dict[str, Any]) -> MoonishError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class InvalidArgumentError(MoonishError):
    """The caller asked for something that cannot be answered as asked."""

    kind = "invalid_argument"


class LsnNotRetainedError(InvalidArgumentError):
    """The requested LSN is older than the oldest LSN still retained.

    Attributes:
        oldest_lsn: the oldest LSN the log still holds.
    """

    kind = "not_retained"

    def __init__(self, requested_lsn: int, oldest_lsn: int, *, path: str | None = None) -> None:
        self.oldest_lsn = oldest_lsn
        super().__init__(
            f"LSN {requested_lsn} is no longer retained; the oldest retained LSN is {oldest_lsn}",
            path=path,
            lsn=requested_lsn,
        )


class LsnDiscardedError(LsnNotRetainedError):
    """The requested LSN lies in a range that was cut out of the log: by ``moonish wal
    repair`` (the records were damaged, or stood after damage), or by a writer cutting a torn
    tail after a crash, past the first LSN of the range (the caller read records the crash
    took). Those LSNs are never written again.

    Attributes:
        first_lsn, last_lsn: the discarded range, inclusive.
        oldest_lsn: where the log continues (``last_lsn + 1``).
    """

    def __init__(
        self, requested_lsn: int, first_lsn: int, last_lsn: int, *, path: str | None = None
    ) -> None:
        self.first_lsn, self.last_lsn = first_lsn, last_lsn
        MoonishError.__init__(
            self,
            f"LSN {requested_lsn} was discarded (LSNs {first_lsn}..{last_lsn}, cut by a repair "
            f"or as a torn tail after a crash); "
            f"the log continues at LSN {last_lsn + 1}",
            path=path,
            lsn=requested_lsn,
        )
        self.oldest_lsn = last_lsn + 1


class ConsumerLostError(LsnNotRetainedError):
    """A named consumer cannot go on from its position: it was marked ``lost`` (retention's
    ``max_pinned_bytes``, or ``wal prune --before --force`` passed it), or changes it had not
    confirmed are no longer retained. Every read or ack fails the same way until
    ``moonish consumer seek`` resets it (docs/consumers.md).

    Attributes:
        consumer: the consumer's name.
        status: ``"lost"`` (marked) or ``"active"`` (not marked, but its changes are gone).
        reason: why it was marked lost, or ``None``.
        shard: the shard (token component) whose changes it misses.
        lsn: the first LSN it needs there (its confirmed position + 1).
        oldest_lsn: the oldest LSN that shard still holds.
        gone: how many changes it needs are no longer retained in that shard (0 when it was
            marked lost before anything was removed).
        oldest_token: the token before the oldest retained change of every shard (text), or
            ``None`` where the caller could not tell.
    """

    def __init__(
        self,
        consumer: str,
        *,
        status: str,
        reason: str | None,
        shard: int,
        requested_lsn: int,
        oldest_lsn: int,
        gone: int,
        oldest_token: str | None = None,
        path: str | None = None,
    ) -> None:
        self.consumer, self.status, self.reason = consumer, status, reason
        self.shard, self.gone, self.oldest_token = shard, gone, oldest_token
        self.oldest_lsn = oldest_lsn
        why = f"is lost ({reason})" if status == "lost" else "fell out of retention"
        token = f"; the oldest available token is {oldest_token}" if oldest_token else ""
        MoonishError.__init__(
            self,
            f"consumer {consumer!r} {why}: shard {shard} needs LSN {requested_lsn}, the oldest "
            f"retained is {oldest_lsn} ({gone} changes gone){token}; reset it with "
            f"`moonish consumer seek`",
            path=path,
            lsn=requested_lsn,
        )


class ConsumerNotFoundError(InvalidArgumentError):
    """No consumer of this name is registered in the data directory.

    Attributes:
        consumer: the name asked for.
    """

    def __init__(self, consumer: str, *, path: str | None = None) -> None:
        self.consumer = consumer
        super().__init__(f"no consumer named {consumer!r}", path=path)


class CorruptionError(MoonishError):
    """Stored bytes are damaged; reading stops here and nothing is skipped."""

    kind = "corruption"


class UnsupportedFormatError(MoonishError):
    """Well-formed input of a version or kind this build does not read."""

    kind = "unsupported"


class UnavailableError(MoonishError):
    """Temporarily unavailable (for example, the shard is locked by another writer)."""

    kind = "unavailable"


class WriterLockedError(UnavailableError):
    """Another writer holds the shard's lock file.

    Attributes:
        holder: what the lock file says about the holder (``pid=<n>``), possibly empty.
    """

    def __init__(self, path: str, holder: str) -> None:
        self.holder = holder
        detail = f" held by {holder}" if holder else ""
        super().__init__(f"shard is locked by another writer{detail}", path=path)


class CommandError(InvalidArgumentError):
    """A write command Redis would reject (wrong type, bad argument, wrong arity). Nothing was
    written. ``message`` starts with Redis's error code (``WRONGTYPE``, ``ERR``), as Redis
    replies (https://redis.io/docs/latest/develop/reference/protocol-spec/#simple-errors)."""


class PositionNotRetainedError(LsnNotRetainedError):
    """A merged read's position (a token) points at changes that are no longer in the log:
    retention removed them, or a repair discarded them. (A named consumer's position fails
    with :class:`ConsumerLostError` instead.)

    Attributes:
        oldest_lsn, lsn, path: of the first shard found short (as :class:`LsnNotRetainedError`).
        shard: that shard's number in the data directory (its token component).
        token: the position asked for, as text.
        oldest_token: the oldest position every shard can still serve (``earliest``).
        gone: changes (records) between the position and the oldest available one, summed
            over the shards.
    """

    def __init__(
        self,
        message: str,
        *,
        shard: int,
        oldest_lsn: int,
        lsn: int | None,
        path: str | None,
        token: str,
        oldest_token: str,
        gone: int,
    ) -> None:
        self.shard, self.token, self.oldest_token, self.gone = shard, token, oldest_token, gone
        MoonishError.__init__(self, message, path=path, lsn=lsn)
        self.oldest_lsn = oldest_lsn
