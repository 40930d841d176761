"""Slot migrations between a cluster capture's links: a key that moves from one node to another
makes no change event (docs/design/cluster-capture.md §4; docs/redis-source.md, "A Redis
Cluster").

``MIGRATE`` (Redis ``cluster.c`` ``migrateCommand``) sends the target node ``RESTORE-ASKING key
ttl payload``, which the target propagates as received (its TTL absolute, ``ABSTTL``), and only
for the keys the target acknowledged deletes them on the source and propagates ``DEL k1 ...``:
for a migrated key the target's ``RESTORE-ASKING`` is executed before the source's ``DEL``.
The two arrive on two links, in any order; the capture's one applying thread orders them with
two barriers (moonish.redis.cluster.session) and this pairing:

- **The target's ``RESTORE-ASKING k``** waits until every other link has *applied* what its
  node had written when the command was received (so the source's last writes to ``k`` are in
  moonish's value). Then, when moonish holds ``k`` with the payload's value and expiry time, it
  writes nothing (the command becomes a ``PING``); with another value it replaces it (``u``);
  without ``k``, it creates it (``c``). Either way ``k`` is *handed* to the target's link.
- **A ``DEL``/``UNLINK`` of link S** waits until every other link has *received* what its node
  had written when the command was received: a matching ``RESTORE-ASKING`` is then applied or
  waiting. Each key handed to another link, or with a ``RESTORE-ASKING`` of another link still
  waiting, is taken out of the command (no ``d``: the key moved, its value did not change).
  A key with neither is asked about (``moved``, moonish.redis.cluster.order): when S's node
  no longer serves its slot, or migrates it, and the node that serves or imports it holds the
  key (``EXISTS``), it moved while moonish was not looking (the capture restarted between the
  two commands) and is taken out too; the rest is a real delete (a key that expired in
  flight, a client's ``DEL``).

Neither barrier waits for the other (a ``DEL`` waits on reception only), so the links cannot
deadlock; a node that cannot be asked for its offset is not waited for (counted as
``unsampled``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from moonish.redis.rdb.dump import decode_dump, verify_dump_payload
from moonish.slots import shard_of_key
from moonish.state.shard import ShardWriter
from moonish.values.model import Entry, state_image

RESTORE_ASKING = b"RESTORE-ASKING"
DELETES = frozenset({b"DEL", b"UNLINK"})
NO_CHANGE = [b"PING"]
"""What a command that changes nothing becomes: the applier counts it as applied, writes
nothing and moves its offset."""

UNLESS_EQUAL = b"\x00moonish:restore-unless-equal"
"""The last argument a capture in several processes appends to a paired ``RESTORE-ASKING``:
the worker that owns the key decides it (:func:`restore_unless_equal`) and takes it off. No
command of a stream ends so (Redis refuses it)."""

APPLIED, RECEIVED = "applied", "received"
MIGRATE_TTL_SLACK_MS = 1_000
"""How far a migrated key's expiry time may move and still count as the same value."""


def barrier_of(argv: list[bytes]) -> str | None:
    """Which barrier the command waits for: :data:`APPLIED` (``RESTORE-ASKING``),
    :data:`RECEIVED` (``DEL``, ``UNLINK``) or ``None``."""
    name = argv[0].upper()
    if name == RESTORE_ASKING:
        return APPLIED
    if name in DELETES:
        return RECEIVED
    return None


class Handoffs:
    """The keys in flight between links, and what the pairing did.

    Args:
        writers: every shard's writer (the keyspace is asked for a key's value).

    Attributes:
        handed: key -> the link a ``RESTORE-ASKING`` handed it to, until the source's ``DEL``.
        waiting: per link, the keys of its received ``RESTORE-ASKING`` not yet applied.
        counts: ``migrated`` (keys moved without an event), ``migrated_changed`` (a
            ``RESTORE-ASKING`` whose value differed: ``u``), ``migrated_new`` (``c``: no such
            key), ``migrated_unpaired`` (a source's ``DEL`` of a key found on its new node),
            ``unclassified_deletes`` (kept: the new node could not be asked), ``unsampled`` (a
            node not asked for its offset at a barrier), ``barrier_timeouts``.
    """

    def __init__(self, writers: list[ShardWriter]) -> None:
        self.writers = writers
        self.handed: dict[bytes, str] = {}
        self.waiting: dict[str, Counter[bytes]] = {}
        self.paired: set[bytes] = set()  # keys whose DEL came before their RESTORE-ASKING
        self.counts: Counter[str] = Counter()

    def received(self, link: str, argv: list[bytes]) -> None:
        """Note a command of ``link`` as received (not yet applied)."""
        if len(argv) > 1 and argv[0].upper() == RESTORE_ASKING:
            self.waiting.setdefault(link, Counter())[argv[1]] += 1

    def restore(self, link: str, argv: list[bytes]) -> list[bytes]:
        """What to apply for ``link``'s ``RESTORE-ASKING`` ``argv`` (module docstring).

        Raises:
            RdbCorruptionError, RdbUnsupportedError: a payload moonish cannot read (as
                ``RESTORE``).
        """
        key = argv[1]
        waiting = self.waiting.get(link)
        if waiting is not None and waiting[key] > 0:
            waiting[key] -= 1
            if not waiting[key]:
                del waiting[key]
        if key in self.paired:  # its source's DEL was taken out already
            self.paired.discard(key)
        else:
            self.handed[key] = link
        return self.decide(argv)

    def decide(self, argv: list[bytes]) -> list[bytes]:
        """What a paired ``RESTORE-ASKING`` applies: :func:`restore_unless_equal` on the
        shards' keyspaces (a capture in several processes: decided by the worker that owns
        the key, moonish.redis.cluster.workers)."""
        return restore_unless_equal(argv, self.writers, self.counts)

    def libraries(self) -> Mapping[bytes, bytes]:
        """The function libraries moonish holds (every shard holds the same)."""
        return self.writers[0].libraries

    def functions(self, argv: list[bytes]) -> None:
        """A reconciled ``FUNCTION`` command about to be applied (moonish.redis.cluster
        .functions): the shards apply it (a capture in several processes keeps a copy of the
        libraries, moonish.redis.cluster.workers)."""

    def totals(self) -> dict[str, int]:
        """:attr:`counts`, with what workers counted (a capture in several processes)."""
        return dict(self.counts)

    def delete(self, link: str, argv: list[bytes], moved: Callable[[bytes], bool]) -> list[bytes]:
        """What to apply for ``link``'s ``DEL``/``UNLINK`` ``argv``: without the keys that
        moved to another link (:data:`NO_CHANGE` when none is left); ``moved`` answers for a
        key the pairing knows nothing of."""
        kept = [argv[0]]
        for key in argv[1:]:
            to = self.handed.get(key)
            if to is not None and to != link:
                del self.handed[key]
                continue
            if self._waiting_elsewhere(link, key):
                self.paired.add(key)
                continue
            if moved(key):
                self.counts["migrated_unpaired"] += 1
                continue
            kept.append(key)
        if len(kept) == 1:
            return NO_CHANGE
        return kept

    def _waiting_elsewhere(self, link: str, key: bytes) -> bool:
        return any(other != link and keys.get(key, 0) > 0 for other, keys in self.waiting.items())


def restore_unless_equal(
    argv: list[bytes], writers: Sequence[ShardWriter], counts: Counter[str]
) -> list[bytes]:
    """What to apply for a paired ``RESTORE-ASKING`` ``argv`` on the keyspace of ``writers``
    (every shard's, in shard order: the key's shard is asked): :data:`NO_CHANGE` when the key
    holds the payload's value (``migrated``), a ``REPLACE`` restore when it holds another
    (``migrated_changed``), ``argv`` when it is missing (``migrated_new``); ``counts`` gets
    the count named.

    Raises:
        RdbCorruptionError, RdbUnsupportedError: a payload moonish cannot read.
    """
    key = argv[1]
    writer = writers[shard_of_key(key, len(writers))]
    current = writer.keyspace.get(0, key)
    if current is None:
        counts["migrated_new"] += 1
        return argv
    if _same(key, current, argv):
        counts["migrated"] += 1
        return NO_CHANGE
    counts["migrated_changed"] += 1
    options = [option for option in argv[4:] if option.upper() != b"REPLACE"]
    return [*argv[:4], b"REPLACE", *options]


def _same(key: bytes, current: Entry, argv: list[bytes]) -> bool:
    """Whether ``RESTORE-ASKING key ttl payload [ABSTTL ...]`` would set the value ``current``
    holds, with its expiry time give or take :data:`MIGRATE_TTL_SLACK_MS` (``MIGRATE`` sends
    the time left, which the target adds to its own clock: the key's expiry moves by the
    milliseconds the migration took); a relative TTL cannot be compared (``False``)."""
    if len(argv) < 4:
        return False
    absolute = any(option.upper() == b"ABSTTL" for option in argv[4:])
    try:
        ttl = int(argv[2])
    except ValueError:
        return False
    if ttl and not absolute:
        return False
    entry = decode_dump(key, argv[3], verify_dump_payload(argv[3]))
    entry.expire_at_ms = ttl or None
    was = current.expire_at_ms
    if ttl and was is not None and abs(ttl - was) <= MIGRATE_TTL_SLACK_MS:
        entry.expire_at_ms = was
    return state_image(0, key, entry) == state_image(0, key, current)
