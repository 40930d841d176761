"""One load's ``r`` rows written by several processes at once, read as one snapshot: exactly
one first row and one last row over every shard (docs/envelopes.md, "Snapshot rows").

A merged read orders records by commit time, then shard, then LSN. A load that one process
writes shard after shard reads in shard order, so the first shard's first row and the last
shard's last are the load's (moonish.state.load, ``load_order``). Shards loaded at once by
``P`` forked processes (``wal import-rdb --processes P``, a capture's full resync with
``--processes P``) interleave by commit time, which no process knows in advance; so they
agree through memory they share (:class:`SpreadLoad`, made before the fork), and choose the
commit times that make the marks true:

- every process **joins** the load once it has read the RDB, saying how many of its shards
  get rows;
- the first row batch any process appends **claims** the load's first row (the writer's
  ``CHANGE_LOAD_FIRST``); it is appended under the shared lock, and every other row of the
  load, in any process, is appended at a commit time at least 1 µs after it;
- every shard's **last row** is appended under the lock, once every process has joined; the
  one after which no shard's last row is outstanding is the load's last row
  (``CHANGE_LOAD_LAST``), appended at a commit time 1 µs after the latest of every last row
  before it (each shard's last row is its latest, so after every row of the load).

Commit times only ever move forward for this (a writer never goes below its last record or
its closed time anyway), by at most the time the other processes took. What the marks cannot
survive: a shard counted as getting rows that gets none (every key already as the source
has it: a load cut short and run again with another RDB) leaves the load without a
``"last"`` row in a merged read.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Any, Final

from moonish.errors import UnavailableError
from moonish.log.records import KvChange, row_name

AppendAt = Callable[[list[KvChange], bytes, int], int]
"""Appends records (each alone) with a source position on the last one (``b""``: none) at a
commit time of at least the third argument (µs; 0: the clock's); returns the commit time
they got."""

_LOAD, _JOINED, _PENDING, _CLAIMED, _FIRST_US, _MAX_US = range(6)
JOIN_TIMEOUT_S: Final = 600.0
"""How long a process waits for the others to join a load before it gives up (a process that
died before it read the RDB)."""


class SpreadLoad:
    """What the processes of a spread load share (create it before forking them).

    Args:
        context: the ``multiprocessing`` context the processes are forked with.
        processes: how many processes write every load (each joins each load once).
        timeout_s: how long :meth:`RowOrder.last` waits for every process to join.
    """

    def __init__(self, context: Any, processes: int, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        self._cond: Any = context.Condition()
        # anonymous shared memory: forked processes share it, and it holds no descriptor
        self._cells: Any = memoryview(mmap.mmap(-1, 6 * 8)).cast("q")
        self.processes = processes
        self.timeout_s = timeout_s

    def join(
        self, load: int, shards_with_rows: int, first: bool = True, last: bool = True
    ) -> RowOrder:
        """Join load number ``load`` (1, 2, ...: every process counts its loads alike) with
        ``shards_with_rows`` shards that get rows; the order its rows are appended in.
        ``first``/``last``: whether the load's first and last rows open and close a snapshot
        (every process passes the same; a cluster's first loads, one per link, make one
        snapshot: the first opens it, the last closes it)."""
        with self._cond:
            cells = self._cells
            if cells[_LOAD] != load:
                for cell in range(6):
                    cells[cell] = 0
                cells[_LOAD] = load
            cells[_JOINED] += 1
            cells[_PENDING] += shards_with_rows
            self._cond.notify_all()
        return RowOrder(self, first, last)


class RowOrder:
    """One process's part of a spread load: how its shards' rows are appended (used by
    ``moonish.state.load.load_entries``)."""

    def __init__(self, spread: SpreadLoad, first: bool = True, last: bool = True) -> None:
        self._spread = spread
        self.marks_first, self.marks_last = first, last
        """Whether the load's first and last rows are marked (:meth:`SpreadLoad.join`)."""
        self.floor_us = 0
        """The least commit time of this process's rows other than the load's first."""

    def first(self, records: list[KvChange], append: AppendAt) -> None:
        """Append a shard's first row batch (``records[0]``, marked as the shard's first row,
        becomes the load's first row if no process claimed it yet)."""
        cond, cells = self._spread._cond, self._spread._cells
        with cond:
            floor = self._claim(records, cells)
            commit = append(records, b"", floor)
            self._claimed(commit, floor, cells)

    def last(self, record: KvChange, append: AppendAt, source: bytes, only: bool) -> None:
        """Append a shard's last row (``only``: it is its first row too) with ``source``,
        marked as the load's last row if no other shard's last row is outstanding.

        Raises:
            UnavailableError: not every process joined the load within ``timeout_s``.
        """
        spread = self._spread
        cond, cells = spread._cond, spread._cells
        with cond:
            if not cond.wait_for(lambda: cells[_JOINED] >= spread.processes, spread.timeout_s):
                raise UnavailableError(
                    f"only {cells[_JOINED]} of {spread.processes} processes joined the load "
                    f"within {spread.timeout_s:g} s (one ended early?); run it again"
                )
            records = [record._replace(row=row_name(only, True))]
            floor = self._claim(records, cells) if only else self.floor_us
            cells[_PENDING] -= 1
            is_last = cells[_PENDING] <= 0
            if is_last and self.marks_last:
                load_first = records[0].row.endswith(("+load_first", "+load_only"))
                records[0] = record._replace(row=row_name(only, True, load_first, True))
                floor = max(floor, cells[_MAX_US] + 1)
            commit = append(records, source, floor)
            if only:
                self._claimed(commit, floor, cells)
            cells[_MAX_US] = max(cells[_MAX_US], commit)

    def _claim(self, records: list[KvChange], cells: Any) -> int:
        """Under the lock: mark ``records[0]`` the load's first row if it is unclaimed (commit
        time: the clock's), else the least commit time of a row after it."""
        if cells[_CLAIMED]:
            return max(self.floor_us, int(cells[_FIRST_US]) + 1)
        if self.marks_first:
            head = records[0]
            alone = head.row.startswith("only")
            records[0] = head._replace(row=row_name(True, alone, True))
        return 0

    def _claimed(self, commit: int, floor: int, cells: Any) -> None:
        if not cells[_CLAIMED]:
            cells[_CLAIMED], cells[_FIRST_US] = 1, commit
        self.floor_us = max(self.floor_us, floor, cells[_FIRST_US] + 1)
