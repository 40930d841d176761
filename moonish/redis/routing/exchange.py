"""Commands across shards of several worker processes: a parallel AOF import
(moonish.redis.aof.parallel) and a live capture on several cores
(moonish.redis.capture.workers) give each worker a group of shards, and a command whose keys
live in shards of different workers (``RENAME a b``, ``SMOVE``, ``COPY``, ``MSETNX``,
``SUNIONSTORE``...: moonish.redis.routing.router ``run_across``) meets every involved worker.

The lowest involved worker leads (:class:`PeerExchange`): each other one sends it the entries
of the command's keys that its shards hold (in every db: ``COPY ... DB n``), then waits; the
leader puts them in stand-in shards (moonish.state.shadow), runs the command on all the keys,
and sends each worker back the reply, its shards' records and its keys' new entries, which it
stores before going on. Each worker appends its records as one process would. ``SORT ...
BY/GET`` reads keys it cannot name in advance: the callers run such input in one process.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any

from moonish.clock import Clock
from moonish.errors import UnavailableError
from moonish.redis.routing.router import Router
from moonish.slots import shard_of_key
from moonish.state.commands.execute import keys_of
from moonish.state.commands.sort import pattern_keys
from moonish.state.config import StreamConfig
from moonish.state.shadow import KeyspaceShard
from moonish.state.shard import Prepared, ShardWriter
from moonish.values.model import Entry

Lent = list[tuple[int, bytes, Entry | None]]
"""``(db, key, entry or None)``: keys as a worker's shards hold them."""


class PeerStoppedError(UnavailableError):
    """Another worker ended before a command across shards was complete (its own error, if
    it had one, is the one to report)."""


class PeerExchange:
    """A worker's side of commands across shards of several workers (module docstring), of
    an import or a live capture (moonish.redis.capture.workers).

    Args:
        owner: the worker writing each shard.
        number: this worker's.
        peers: a connection to each other worker.
        stream, clock: the stream configuration and clock of stand-in shards.
    """

    def __init__(
        self,
        owner: list[int],
        number: int,
        peers: dict[int, Connection],
        stream: StreamConfig,
        clock: Clock,
    ) -> None:
        self.owner, self.number, self.peers = owner, number, peers
        self.stream, self.clock = stream, clock

    def owns_all(self, shards: list[int]) -> bool:
        return all(self.owner[shard] == self.number for shard in shards)

    def across(
        self, router: Router, db: int, argv: list[bytes], now_us: int, shards: list[int]
    ) -> list[tuple[int, Prepared]]:
        count = len(router.writers)
        workers = sorted({self.owner[shard] for shard in shards})
        keys = set(keys_of(argv))
        if argv[0].upper() == b"SORT":  # BY/GET patterns read keys of any worker: all lend
            workers = sorted(set(self.owner))
            keys |= self._pattern_keys(router, db, argv)
        if self.number not in workers:  # none of its shards: the others run it
            return []
        if workers[0] != self.number:  # lend this worker's keys, take back what happened
            link = self.peers[workers[0]]
            _send(link, _lend(router.writers, keys, self.owner, self.number))
            reply, records, after = _receive(link)
            for key_db, key, entry in after:
                keyspace = router.writers[shard_of_key(key, count)].keyspace
                if entry is None:
                    keyspace.remove(key_db, key)
                else:
                    keyspace.put(key_db, key, entry)
            return [(shard, Prepared(reply, [], records[shard])) for shard in records]
        writers = list(router.writers)  # the other workers' shards: stand-ins with their keys
        lent: dict[int, Lent] = {}
        for peer in workers[1:]:
            lent[peer] = _receive(self.peers[peer])
            for key_db, key, entry in lent[peer]:
                shard = shard_of_key(key, count)
                if writers[shard] is router.writers[shard]:
                    writers[shard] = KeyspaceShard(self.stream, self.clock)
                if entry is not None:
                    writers[shard].keyspace.put(key_db, key, entry)
        results = router.run_across(db, argv, now_us, shards, writers)
        reply = results[0][1].reply if results else None
        for peer in workers[1:]:
            theirs = {
                shard: prepared.records for shard, prepared in results if self.owner[shard] == peer
            }
            _send(self.peers[peer], (reply, theirs, _after(lent[peer], writers)))
        return [
            (shard, prepared) for shard, prepared in results if self.owner[shard] == self.number
        ]

    def _pattern_keys(self, router: Router, db: int, argv: list[bytes]) -> set[bytes]:
        """The keys in db ``db`` of this worker's shards that ``SORT``'s patterns may read."""
        reads = pattern_keys(argv)
        found: set[bytes] = set()
        for shard, writer in enumerate(router.writers):
            if self.owner[shard] == self.number:
                found.update(filter(reads, writer.keyspace.dbs.get(db, {})))
        return found


def _lend(writers: list[ShardWriter], keys: set[bytes], owner: list[int], number: int) -> Lent:
    """The entries of ``keys`` in this worker's shards, in every db (``None``: in none)."""
    count, lent = len(writers), []  # type: int, Lent
    for key in keys:
        shard = shard_of_key(key, count)
        if owner[shard] == number:
            dbs = writers[shard].keyspace.dbs
            found: Lent = [(db, key, keys_in[key]) for db, keys_in in dbs.items() if key in keys_in]
            lent += found or [(0, key, None)]  # named even when in no db: its shard is lent
    return lent


def _after(lent: Lent, writers: list[ShardWriter]) -> Lent:
    """The lent keys' entries now, in every db where they were or now are (a command may
    move or copy a key to another db)."""
    count, after = len(writers), []  # type: int, Lent
    for key in {key for _, key, _ in lent}:
        dbs = writers[shard_of_key(key, count)].keyspace.dbs
        where = {db for db, k, _ in lent if k == key} | {db for db in dbs if key in dbs[db]}
        after += [(db, key, dbs.get(db, {}).get(key)) for db in sorted(where)]
    return after


def _receive(link: Connection) -> Any:
    """The next message from a peer.

    Raises:
        PeerStoppedError: the peer ended (it failed: its error is the one reported).
    """
    try:
        return link.recv()
    except (EOFError, OSError):  # (a peer gone with unread data resets the pipe)
        raise PeerStoppedError(
            "another worker stopped before a command across shards was complete"
        ) from None


def _send(link: Connection, message: Any) -> None:
    """Send ``message`` to a peer.

    Raises:
        PeerStoppedError: the peer ended.
    """
    try:
        link.send(message)
    except OSError:
        raise PeerStoppedError(
            "another worker stopped before a command across shards was complete"
        ) from None
