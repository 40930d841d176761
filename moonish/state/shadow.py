"""``KeyspaceShard``: a shard without a log, for work split over processes (a parallel import,
moonish.redis.aof.parallel; a capture on several cores, moonish.redis.capture.workers).

A worker holds one in place of each shard another worker writes (it runs none of their
commands), and, for a command across shards of several workers, one per other worker's shard
holding the keys that worker lent: the command runs on them as on real shards and their
records (same stream configuration) go back to the shards' writers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from moonish.clock import Clock
from moonish.log.records import KvChange, Message
from moonish.state.config import StreamConfig
from moonish.state.keyspace import Keyspace
from moonish.state.libraries import Libraries
from moonish.state.shard import ShardOptions, ShardWriter


class KeyspaceShard(ShardWriter):
    """A :class:`ShardWriter` without a log: commands change its keyspace and build records
    (:meth:`records`, with ``stream``'s view type) but append nothing.

    Args:
        stream: the stream configuration of the shard it stands for.
        clock: the commands' time.
    """

    def __init__(self, stream: StreamConfig, clock: Clock) -> None:  # no WAL: no super()
        self.options = ShardOptions(stream=stream, expiry_sweep_ms=0)
        self._clock = clock
        self.shard_dir = ""
        self.keyspace = Keyspace()
        keyspace = self.keyspace
        self._resolve: Callable[[bytes], Keyspace] = lambda key: keyspace
        self.source = b""
        self.libraries = Libraries()
        self.live_source = False
        self._lock = threading.RLock()
        self._broken: BaseException | None = None
        self._sweep_error: BaseException | None = None
        self._use(stream)

    @property
    def next_lsn(self) -> int:
        return 1

    @property
    def last_commit_us(self) -> int:
        return 0

    def append(
        self,
        records: Sequence[KvChange | Message],
        atomic: bool,
        commit_us: int,
        source: bytes = b"",
    ) -> list[int]:
        return []

    def append_first(
        self,
        records: Sequence[KvChange | Message],
        atomic: bool,
        commit_us: int,
        source: bytes = b"",
    ) -> int:
        return 0

    def sweep_expired(self) -> int:
        return 0

    def sync(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
