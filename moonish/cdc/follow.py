"""Waking a follower when a shard directory changes: watchdog events, with a polling fallback.

The follower clears the signal *before* it polls the log and waits only if the poll found
nothing, so an append that lands between the poll and the wait still wakes it at once.

A follower that keeps finding changes does not need events, and they are not free: every
append is an inotify event that watchdog's threads turn into Python objects. So after
``IDLE_WATCH_POLLS`` polls in a row without a wait the watches are removed, and the next wait
puts them back and returns at once without waiting: the follower polls again, now watched,
before it really waits, so a change made while nothing watched is found by that poll.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Self


class _WatchdogNotices(logging.Filter):
    """What watchdog (7.x) logs that a follower handles itself, kept off the user's stderr:

    - the error logged when an observer is stopped while its emitter thread is reading an
      event (``watchdog.observers.inotify``): nothing is wrong, the emitter returns as if there
      were no event (gorakhargosh/watchdog#963), but ``cdc tail --follow`` would print it on
      Ctrl-C;
    - the warning that the kernel's inotify queue overflowed and events were lost
      (``watchdog.observers.inotify_c``; a shard directory can change faster than that
      queue drains): events are only hints to poll the log, so every follower is woken at
      once instead, and none waits for its fallback interval.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "queue overflowed" in message:
            for signal in list(_SIGNALS):
                signal.wake()
            return False
        return "called when the thread is inactive" not in message


_NOTICES = _WatchdogNotices()
_READS = frozenset({"opened", "closed_no_write"})
"""Events a reader causes (watchdog 5 reports IN_OPEN and IN_CLOSE_NOWRITE): a follower's
own poll opens heartbeat.json and lists the directory, so waking on them would make every
follower at the end of the log poll in a loop."""
_SIGNALS: weakref.WeakSet[ChangeSignal] = weakref.WeakSet()
IDLE_WATCH_POLLS = 32
"""Polls in a row without a wait after which a signal stops watching (see above)."""


class ChangeSignal:
    """Set whenever a file in ``directory`` changes; waits fall back to polling.

    Args:
        directory: the shard directory to watch (not recursively), or several of them (an
            export follows every shard of a data directory).
        fallback_ms: longest wait without an event, so a missed or unsupported file-system
            notification delays a follower by at most this much.
        watch: use watchdog; ``False`` polls only (every ``fallback_ms``).
    """

    def __init__(
        self, directory: str | Sequence[str], fallback_ms: int = 1000, watch: bool = True
    ) -> None:
        self._event = threading.Event()
        _SIGNALS.add(self)
        self._fallback_s = fallback_ms / 1000
        self._observer: Any = None
        self._directories = [directory] if isinstance(directory, str) else list(directory)
        self._handler: Any = None
        self._watches: list[Any] = []  # scheduled watches; empty while not watching
        self._polls = 0  # clear() calls since the last wait()
        self._watch_lock = threading.Lock()  # (close() may come from another thread)
        self.watching = False
        if watch:
            # watchdog is imported here, not at module load: only followers need it.
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer

            event = self._event

            class Signal(FileSystemEventHandler):
                def on_any_event(self, change: Any) -> None:
                    if change.event_type not in _READS:
                        event.set()

            for name in ("watchdog.observers.inotify", "watchdog.observers.inotify_c"):
                logging.getLogger(name).addFilter(_NOTICES)  # idempotent
            observer = Observer()
            self._handler = Signal()
            try:
                observer.start()
            except OSError:  # inotify unsupported: poll instead
                return
            self._observer, self.watching = observer, True
            if not self._arm():
                self.close()

    def _arm(self) -> bool:
        """Watch the directories; False when watchdog cannot (inotify watches exhausted,
        an unsupported file system): the follower then polls."""
        with self._watch_lock:
            if self._observer is None or self._watches:
                return self._observer is not None
            try:
                for each in self._directories:
                    self._watches.append(
                        self._observer.schedule(self._handler, each, recursive=False)
                    )
            except OSError:
                self._unwatch()
                self.watching = False
                return False
            return True

    def _unwatch(self) -> None:
        for watch in self._watches:
            self._observer.unschedule(watch)
        self._watches = []

    def clear(self) -> None:
        """Forget earlier changes; call before polling the log. After ``IDLE_WATCH_POLLS``
        of these without a :meth:`wait`, the directories are no longer watched."""
        self._event.clear()
        self._polls += 1
        if self._polls == IDLE_WATCH_POLLS and self._watches:
            with self._watch_lock:
                if self._observer is not None:
                    self._unwatch()

    def wait(self, timeout_ms: int | None = None) -> bool:
        """Block until a change (or ``wake``) or the fallback interval (or ``timeout_ms``,
        if shorter); True if signalled. If the directories were not watched (the follower
        kept finding changes), watches them again and returns True at once: poll again
        before waiting."""
        self._polls = 0
        if self.watching and not self._watches:
            return self._arm() or True
        timeout_s = (
            self._fallback_s if timeout_ms is None else min(self._fallback_s, timeout_ms / 1000)
        )
        return self._event.wait(timeout_s)

    def wake(self) -> None:
        """Release a waiting follower now (used by ``close``)."""
        self._event.set()

    def close(self) -> None:
        """Stop watching. Idempotent."""
        self._event.set()
        with self._watch_lock:
            observer, self._observer, self._watches = self._observer, None, []
        if observer is not None:
            observer.stop()
            observer.join()


class Following:
    """What the tails share: ``close()`` from any thread ends a blocked ``follow`` iteration
    at once and releases files once, under the lock a poll holds (so a poll in progress
    finishes first). Subclasses poll under ``_lock``, check ``_closed``, and release their
    files in :meth:`_release_files`."""

    def __init__(self, signal: ChangeSignal | None) -> None:
        self._signal = signal
        self._closed = False  # set by close(), from any thread
        self._released = False
        self._lock = threading.Lock()  # held while polling

    def _release_files(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop the iteration and release files and watches. Idempotent; may be called from
        another thread: a blocked ``follow`` iteration wakes and ends at once, and a poll in
        progress finishes before the files are closed."""
        self._closed = True
        if self._signal is not None:
            self._signal.wake()
        with self._lock:
            if self._released:
                return
            self._released = True
            if self._signal is not None:
                self._signal.close()
            self._release_files()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
