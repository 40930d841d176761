"""Decoding: frames into typed change events, with the Debezium op each one stands for.

Op rules (docs/envelopes.md explains them):

- ``d``: the record's key is gone: ``DEL``, ``UNLINK``, ``GETDEL``, and the source key of
  ``RENAME`` / ``RENAMENX``.
- ``t``: ``FLUSHDB`` / ``FLUSHALL`` (Debezium's truncate: the whole collection is emptied).
- ``m``: a checkpoint, which is not a data change (Debezium's logical-decoding message).
- ``u``: every other write, including ``HDEL``, ``SREM``, pops and expiry changes, which change
  the key but need not remove it. (``c`` needs prior-state tracking and arrives with it.)
"""

from __future__ import annotations

from typing import NamedTuple

from moonish.log.records import Checkpoint, KvCommand, Record, decode_payload

DELETE_COMMANDS = frozenset({"DEL", "UNLINK", "GETDEL"})
"""Commands that remove the key they name."""
SOURCE_DELETE_COMMANDS = frozenset({"RENAME", "RENAMENX"})
"""Commands that remove their first key (the source) and write their second."""
TRUNCATE_COMMANDS = frozenset({"FLUSHDB", "FLUSHALL"})
"""Commands that empty a whole database (or all of them)."""
SPECIAL_COMMANDS = DELETE_COMMANDS | SOURCE_DELETE_COMMANDS | TRUNCATE_COMMANDS
"""Every command whose op is not ``u`` for some key position."""


class ChangeEvent(NamedTuple):
    """One record of a shard as a change event.

    Attributes:
        shard: the shard id.
        lsn: the record's LSN.
        op: the Debezium op: ``u``, ``d``, ``t`` or ``m`` (see the module docstring).
        commit_us: commit time, microseconds since the Unix epoch.
        envelope: the payload-only Debezium JSON envelope, UTF-8, no trailing newline.
        record_type: the frame's record type (``RecordType``).
        payload: the record's payload bytes as stored.
    """

    shard: int
    lsn: int
    op: str
    commit_us: int
    envelope: bytes
    record_type: int
    payload: bytes

    @property
    def record(self) -> Record:
        """The typed record (``KvCommand``, ``TemporalUpsert``, ``GraphMutation`` or
        ``Checkpoint``), decoded on each access."""
        return decode_payload(self.record_type, self.payload)


def kv_op(command: str, key_pos: int) -> str:
    """The Debezium op for a kv command (upper-cased name) about ``argv[key_pos]``."""
    if command in DELETE_COMMANDS:
        return "d"
    if command in SOURCE_DELETE_COMMANDS:
        return "d" if key_pos == 1 else "u"
    if key_pos == 0 and command in TRUNCATE_COMMANDS:
        return "t"
    return "u"


def op_of(record: Record) -> str:
    """The Debezium op code for ``record`` (see the module docstring)."""
    if isinstance(record, KvCommand):
        return kv_op(record.command.decode(errors="replace"), record.key_pos)
    if isinstance(record, Checkpoint):
        return "m"
    return "u"
