"""Valkey's atomic slot migration (Valkey 9 ``CLUSTER MIGRATESLOTS``) in a cluster capture
(docs/redis-source.md, "Atomic slot migration").

An atomic migration moves whole slots by replication: the source node sends the target a
snapshot of the slots as commands, then forwards every write made to them meanwhile, pauses
them, and hands the slots over; then it deletes its copies (one ``UNLINK`` per key in its own
stream). The target propagates all of it to its replicas, moonish among them, bracketed by
``CLUSTER SYNCSLOTS`` markers (seen on Valkey 9.1.2: ``ACK`` before the snapshot,
``SNAPSHOT-EOF``, ``PAUSED``, ``FAILOVER-GRANTED``, ``FINISH STATE <SUCCESS|FAILED> NAME <job>``;
the markers carry no slots). Applied as commands, the snapshot would be writes of unchanged
values, and the forwarded writes would be applied a second time (the source's link carries
them already): an ``INCR`` counted twice.

So the target's stream is not applied from its first marker on: the link leaves it, waits
until the node runs no import (``CLUSTER GETSLOTMIGRATIONS``: no ``IMPORT`` job in a state
other than :data:`FINAL_STATES`) and the other links have applied what their nodes had written
then (the source's writes to the slots, up to its pause), and reads the node again by a full
resync, written as the differences of the slots it serves then: the migrated keys are equal
(no event), and the node's own keys changed meanwhile give one event each, their net change. A
failed or cancelled migration leaves the slots with the source: the resync leaves them alone.
The source's ``UNLINK``\\ s of the moved keys are taken out as for ``MIGRATE``
(moonish.redis.cluster.handoff: the key is on the node that serves its slot now).
"""

from __future__ import annotations

from dataclasses import dataclass

from moonish.errors import MoonishError, UnavailableError
from moonish.redis.replication.probe import MasterProbe
from moonish.redis.topology.nodes import pairs

SYNCSLOTS = b"SYNCSLOTS"
FINAL_STATES = frozenset({"success", "failed", "cancelled"})
"""States of a ``CLUSTER GETSLOTMIGRATIONS`` job that has ended."""
ATOMIC_IMPORTS = "atomic_imports"
"""The handoff count of atomic migrations into a node that a link followed."""


def is_slot_migration(argv: list[bytes]) -> bool:
    """Whether ``argv`` is a ``CLUSTER SYNCSLOTS`` marker of an atomic slot migration."""
    return len(argv) > 1 and argv[0].upper() == b"CLUSTER" and argv[1].upper() == SYNCSLOTS


def running_imports(reply: object, path: str = "") -> list[str]:
    """The ``slot_ranges`` of the ``IMPORT`` jobs in a ``CLUSTER GETSLOTMIGRATIONS`` reply
    (RESP2: a list of flat field/value lists; RESP3: maps) that have not ended.

    Raises:
        TopologyError: a job that is not field/value pairs (``path``: the node asked).
    """
    running = []
    for job in reply if isinstance(reply, list) else []:
        fields = pairs(job, path)
        if fields.get("operation") == "IMPORT" and fields.get("state") not in FINAL_STATES:
            running.append(str(fields.get("slot_ranges", "")))
    return running


@dataclass
class ImportWait:
    """A link that left its stream at an atomic migration's marker, until it reads its node
    again.

    Attributes:
        offsets: once the node runs no import: what every other link must have applied first
            (link id -> its node's offset then); ``None`` before.
        error: why the node could not be asked the last time, or ``None``.
    """

    offsets: dict[str, int] | None = None
    error: str | None = None

    def import_running(self, probe: MasterProbe) -> bool:
        """Whether the node behind ``probe`` still runs an ``IMPORT`` job. A node that refuses
        to say (an ACL without ``+cluster|getslotmigrations``), or answers in another shape,
        counts as running, its reason
        kept in :attr:`error`; one that cannot be reached does not (the link then connects,
        fails and follows the slots' new owner, as after any lost link)."""
        try:
            running = running_imports(probe.command(b"CLUSTER", b"GETSLOTMIGRATIONS"), probe.path)
        except MoonishError as exc:
            self.error = f"CLUSTER GETSLOTMIGRATIONS: {exc}"
            return not isinstance(exc, UnavailableError)
        self.error = None
        return bool(running)
