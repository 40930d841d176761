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

from dataclasses import dataclass, field

from moonish.errors import MoonishError, UnavailableError
from moonish.redis.replication.probe import MasterProbe

SYNCSLOTS = b"SYNCSLOTS"
FINAL_STATES = frozenset({"success", "failed", "cancelled"})
"""States of a ``CLUSTER GETSLOTMIGRATIONS`` job that has ended."""
ATOMIC_IMPORTS = "atomic_imports"
"""The handoff count of atomic migrations into a node that a link followed."""


def is_slot_migration(argv: list[bytes]) -> bool:
    """Whether ``argv`` is a ``CLUSTER SYNCSLOTS`` marker of an atomic slot migration."""
    return len(argv) > 1 and argv[0].upper() == b"CLUSTER" and argv[1].upper() == SYNCSLOTS


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def running_imports(reply: object) -> list[str]:
    """The ``slot_ranges`` of the ``IMPORT`` jobs in a ``CLUSTER GETSLOTMIGRATIONS`` reply
    (RESP2: a list of flat field/value lists; RESP3: maps) that have not ended."""
    running = []
    for job in reply if isinstance(reply, list) else []:
        if isinstance(job, dict):
            fields = {_text(key): _text(value) for key, value in job.items()}
        elif isinstance(job, list):
            fields = {_text(job[i]): _text(job[i + 1]) for i in range(0, len(job) - 1, 2)}
        else:
            continue
        if fields.get("operation") == "IMPORT" and fields.get("state") not in FINAL_STATES:
            running.append(fields.get("slot_ranges", ""))
    return running


@dataclass
class ImportWait:
    """A link that left its stream at an atomic migration's marker, until it reads its node
    again.

    Attributes:
        since_us: when the marker was met (µs since the Unix epoch).
        offsets: once the node runs no import: what every other link must have applied first
            (link id -> its node's offset then); ``None`` before.
        errors: the last reason the node could not be asked, if any.
    """

    since_us: int
    offsets: dict[str, int] | None = None
    errors: list[str] = field(default_factory=list)

    def import_running(self, probe: MasterProbe) -> bool:
        """Whether the node behind ``probe`` still runs an ``IMPORT`` job. A node that refuses
        to say (an ACL without ``+cluster|getslotmigrations``) counts as running, its reason
        kept in :attr:`errors`; one that cannot be reached does not (the link then connects,
        fails and follows the slots' new owner, as after any lost link)."""
        try:
            reply = probe.command(b"CLUSTER", b"GETSLOTMIGRATIONS")
        except UnavailableError as exc:
            self.errors[:] = [f"CLUSTER GETSLOTMIGRATIONS: {exc}"]
            return False
        except MoonishError as exc:
            self.errors[:] = [f"CLUSTER GETSLOTMIGRATIONS: {exc}"]
            return True
        self.errors.clear()
        return bool(running_imports(reply))
