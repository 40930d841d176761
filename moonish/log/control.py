"""The shard's control file (``<shard_dir>/control.json``): where the log ends, kept apart
from the segments so that it survives their removal (PostgreSQL keeps the WAL position in
``pg_control`` for the same reason).

::

    {
      "format": "moonish-control",
      "version": 1,
      "shard": <id>,              the shard id its segments carry
      "next_lsn": <n>,            the writer never writes an LSN below this
      "clean": true | false,      the last writer closed: next_lsn is the exact end of the log
      "discarded": [[a, b], ...], inclusive LSN ranges cut out: by `moonish wal repair`, or
                                  by a writer cutting a torn tail
      "torn": [[a, b], ...],      the ranges among them a writer cut as a torn tail
      "crc32c": <checksum of the bytes before this member>
    }

The writer stores ``clean: false`` and its starting LSN when it opens and ``clean: true`` and
the next LSN when it closes; ``moonish wal repair`` adds discarded ranges, and so does a writer
that cuts a torn tail whose frame headers name LSNs (moonish.log.used). So:

- when every segment is removed (retention, a person), the next writer continues at
  ``next_lsn`` and readers know that LSNs below it are no longer retained, rather than
  starting over at LSN 1 and giving old LSNs new contents;
- when a writer died and every segment was removed after it, nobody knows which LSNs it used:
  the next writer refuses to guess (``moonish wal repair --next-lsn``);
- LSNs in a discarded range are never written again; a reader that reaches one gets
  :class:`~moonish.errors.LsnDiscardedError` naming where the log continues, except at the
  first LSN of a ``torn`` range: a reader there read none of the cut records (a torn tail is
  never "committed" to a reader on disk; it can only have been read whole before a crash took
  it), and goes on after the range.

A shard without the file is read as if it said ``clean: false`` with the end its segments
give.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from moonish.errors import CorruptionError, InvalidArgumentError
from moonish.fileio import dump_checked, read_checked, replace_atomically
from moonish.log.format import CONTROL_NAME
from moonish.log.segment import list_snapshots

FORMAT, VERSION = "moonish-control", 1


@dataclass(frozen=True, slots=True)
class Control:
    """What the control file says (see the module docstring)."""

    shard: int
    next_lsn: int
    clean: bool
    discarded: tuple[tuple[int, int], ...] = field(default=())
    torn: tuple[tuple[int, int], ...] = field(default=())

    def discarded_range(self, lsn: int) -> tuple[int, int] | None:
        """The discarded range ``(first, last)`` that holds ``lsn``, or ``None``."""
        for first, last in self.discarded:
            if first <= lsn <= last:
                return first, last
        return None

    def passed_at(self, lsn: int) -> int | None:
        """Where a reader positioned at ``lsn`` goes on when ``lsn`` starts a range a writer
        cut as a torn tail (the LSN after the discarded range that holds it), else ``None``
        (a reader in a discarded range anywhere else gets ``LsnDiscardedError``)."""
        if not any(first == lsn for first, _ in self.torn):
            return None
        span = self.discarded_range(lsn)
        return span[1] + 1 if span is not None else None

    def with_discarded(self, new: tuple[int, int] | None, *, torn: bool = False) -> Control:
        """This control with the range ``new`` (inclusive) discarded too: overlapping and
        adjacent ranges joined; ``torn``: it is a range a writer cut as a torn tail."""
        if new is None:
            return self
        ordered = sorted([*self.discarded, new])
        joined: list[tuple[int, int]] = []
        for first, last in ordered:
            if joined and first <= joined[-1][1] + 1:
                joined[-1] = (joined[-1][0], max(joined[-1][1], last))
            else:
                joined.append((first, last))
        cut = tuple(sorted({*self.torn, new})) if torn else self.torn
        return Control(self.shard, max(self.next_lsn, new[1] + 1), self.clean, tuple(joined), cut)

    def lost_after(self, lsn: int) -> bool:
        """Whether the log had reached beyond ``lsn`` (the LSN after the last record the
        segments hold) by more than a repair discarded: records were lost from its end."""
        return self.next_lsn > lsn and not self.covers(lsn, self.next_lsn - 1)

    def end_after(self, lsn: int) -> int:
        """The next LSN of a log whose segments end before ``lsn``: ``next_lsn`` when a
        repair discarded every LSN from ``lsn`` up to it, else ``lsn``."""
        if self.next_lsn > lsn and self.covers(lsn, self.next_lsn - 1):
            return self.next_lsn
        return lsn

    def covers(self, first: int, last: int) -> bool:
        """Whether the discarded ranges cover every LSN in ``[first, last]``."""
        lsn = first
        while lsn <= last:
            span = self.discarded_range(lsn)
            if span is None:
                return False
            lsn = span[1] + 1
        return True


def control_path(shard_dir: str) -> str:
    return os.path.join(shard_dir, CONTROL_NAME)


def log_floor(shard_dir: str, control: Control | None) -> int:
    """The next LSN of a shard that holds no segment: where control.json says the log ended,
    else after the newest snapshot, else 1."""
    if control is not None:
        return control.next_lsn
    snapshots = list_snapshots(shard_dir)
    return snapshots[-1] + 1 if snapshots else 1


def load_control(shard_dir: str) -> Control | None:
    """The shard's control file, or ``None`` if it has none.

    Raises:
        CorruptionError: the file is damaged (checksum) or its fields are out of range.
        UnsupportedFormatError: another format or a version this build does not read.
    """
    path = control_path(shard_dir)
    document = read_checked(path, FORMAT, VERSION)
    if document is None:
        return None
    try:
        shard, next_lsn, clean = document["shard"], document["next_lsn"], document["clean"]
        discarded = tuple((int(a), int(b)) for a, b in document["discarded"])
        torn = tuple((int(a), int(b)) for a, b in document.get("torn", ()))
        if not isinstance(shard, int) or shard < 0 or not isinstance(clean, bool):
            raise ValueError(f"shard {shard!r}, clean {clean!r}")
        if not isinstance(next_lsn, int) or next_lsn < 1:
            raise ValueError(f"next_lsn {next_lsn!r}")
        if any(not 1 <= a <= b < next_lsn for a, b in discarded):
            raise ValueError(f"discarded ranges {discarded} (next_lsn {next_lsn})")
        control = Control(shard, next_lsn, clean, discarded, torn)
        if any(not control.covers(a, b) for a, b in torn):
            raise ValueError(f"torn ranges {torn} outside the discarded ones {discarded}")
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptionError(f"bad control file fields: {error}", path=path) from None
    return control


def store_control(shard_dir: str, control: Control) -> None:
    """Replace the control file atomically (temporary name, fsync, rename)."""
    document: dict[str, object] = {
        "format": FORMAT,
        "version": VERSION,
        "shard": control.shard,
        "next_lsn": control.next_lsn,
        "clean": control.clean,
        "discarded": [list(span) for span in control.discarded],
    }
    if control.torn:  # only then: a file without it is read by builds that do not know it
        document["torn"] = [list(span) for span in control.torn]
    replace_atomically(control_path(shard_dir), [dump_checked(document)])


def beyond_end(
    control: Control | None, next_lsn: int, shard_dir: str, lsn: int
) -> InvalidArgumentError:
    """The error for a position ``lsn`` past a log whose next LSN is ``next_lsn`` (after the
    LSNs a repair discarded, when control.json says the log continues after them)."""
    end = next_lsn
    if control is not None and control.next_lsn > end and control.covers(end, control.next_lsn - 1):
        end = control.next_lsn  # after LSNs a repair discarded
    return InvalidArgumentError(
        f"LSN {lsn} is beyond the end of the log; the next LSN is {end}", path=shard_dir, lsn=lsn
    )


def lost_end(control: Control | None, next_lsn: int, path: str, offset: int) -> CorruptionError:
    """The error for a log that ends at ``next_lsn - 1`` (in segment ``path`` at ``offset``)
    although control.json says it had reached further: records lost from its end."""
    reached = control.next_lsn - 1 if control is not None else next_lsn - 1
    return CorruptionError(
        f"the log ends at LSN {next_lsn - 1}, but control.json says it had reached "
        f"LSN {reached}: records were lost from its end (a truncated or removed newest "
        "segment)",
        path=path,
        offset=offset,
        lsn=next_lsn,
    )
