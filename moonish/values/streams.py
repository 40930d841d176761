"""Redis streams as moonish keeps them, and their image value (docs/images.md, "Streams").

The fields of a Redis 7.0 stream (``stream``, ``streamCG``, ``streamNACK``, ``streamConsumer``
in Redis's src/stream.h; kept as src/t_stream.c keeps them)::

    Stream
      entries          OrderedDict {StreamId: [field, value, ...]} in ID order: O(1) to find,
                       add at the end and remove at the front (trimming), like Redis's
                       radix tree of listpacks (a plain dict's front slows as it is trimmed)
      last_id          the largest ID ever added, or what XSETID set
      entries_added    entries ever added (XADD), or what XSETID ENTRIESADDED set
      max_deleted_id   the largest ID XDEL removed (trimming does not count); 0-0: none
      groups           {name: ConsumerGroup}, shown by name bytes (Redis's radix tree order)
      first_id()       the first entry's ID, 0-0 when empty (Redis stores it; it is always this)
    ConsumerGroup
      last_id          the last delivered ID
      entries_read     the group's logical read counter; -1: unknown (SCG_INVALID_ENTRIES_READ)
      pending          {StreamId: PendingEntry}: the group's PEL (each consumer's PEL is the
                       part of it the consumer owns)
      consumers        {name: seen time in ms since the Unix epoch}
    PendingEntry       consumer name, delivery_time_ms, delivery_count

Redis 7.2's consumer ``active-time`` is not kept: moonish follows Redis 7.0.

The image value (UTF-8 JSON object, keys in this order; text as in :mod:`moonish.values.jsontext`)::

    {"entries": [{"id": "<ms>-<seq>", "fields": [[field, value], ...]}, ...],   by ID
     "last_id": "<ms>-<seq>", "entries_added": <n>, "max_deleted_id": "<ms>-<seq>",
     "groups": [{"name": <text>, "last_delivered_id": "<ms>-<seq>",
                 "entries_read": <n>|null,                                     null: unknown
                 "pending": [{"id": "<ms>-<seq>", "consumer": <text>,
                              "delivery_time_ms": <ms>, "delivery_count": <n>}, ...],  by ID
                 "consumers": [{"name": <text>, "seen_time_ms": <ms>}, ...]},   by name bytes
                ...]}                                                           by name bytes
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

import orjson

from moonish.values.jsontext import StreamId, format_id, parse_id_text, text, untext
from moonish.values.plainjson import stream_entries as _stream_entries_c

INVALID_ENTRIES_READ: Final = -1
"""A group's ``entries_read`` when Redis cannot tell (``SCG_INVALID_ENTRIES_READ``)."""
ZERO_ID: StreamId = (0, 0)

_stream_entries: Final = _stream_entries_c  # C where built (a Final here: a C static)


class PendingEntry:
    """One entry of a group's pending entries list (``streamNACK``)."""

    __slots__ = ("consumer", "delivery_count", "delivery_time_ms")

    def __init__(self, consumer: bytes, delivery_time_ms: int, delivery_count: int) -> None:
        self.consumer = consumer
        self.delivery_time_ms = delivery_time_ms
        self.delivery_count = delivery_count

    def as_tuple(self) -> tuple[bytes, int, int]:
        return self.consumer, self.delivery_time_ms, self.delivery_count

    def __reduce__(self) -> tuple[type[PendingEntry], tuple[bytes, int, int]]:
        # Pickled when worker processes lend entries to each other (moonish.redis.routing.exchange),
        # as the stream classes below. Spelled out: a class compiled by mypyc (docs/build.md) has
        # no default pickling.
        return PendingEntry, self.as_tuple()


class ConsumerGroup:
    """A consumer group (``streamCG``): see the module docstring."""

    __slots__ = ("consumers", "entries_read", "last_id", "pending")

    def __init__(self, last_id: StreamId, entries_read: int = INVALID_ENTRIES_READ) -> None:
        self.last_id = last_id
        self.entries_read = entries_read
        self.pending: dict[StreamId, PendingEntry] = {}
        self.consumers: dict[bytes, int] = {}

    def owned_by(self, consumer: bytes) -> list[StreamId]:
        """The consumer's PEL: the IDs it owns, in ID order."""
        return sorted(i for i, entry in self.pending.items() if entry.consumer == consumer)

    def copy(self) -> ConsumerGroup:
        group = ConsumerGroup(self.last_id, self.entries_read)
        group.pending = {i: PendingEntry(*e.as_tuple()) for i, e in self.pending.items()}
        group.consumers = dict(self.consumers)
        return group

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _group, (self.last_id, self.entries_read, self.pending, self.consumers)


def _group(
    last_id: StreamId,
    entries_read: int,
    pending: dict[StreamId, PendingEntry],
    consumers: dict[bytes, int],
) -> ConsumerGroup:
    """A :class:`ConsumerGroup` unpickled."""
    group = ConsumerGroup(last_id, entries_read)
    group.pending, group.consumers = pending, consumers
    return group


class Stream:
    """A Redis stream: see the module docstring."""

    __slots__ = ("entries", "entries_added", "groups", "last_id", "max_deleted_id")

    def __init__(self) -> None:
        self.entries: OrderedDict[StreamId, list[bytes]] = OrderedDict()
        self.last_id: StreamId = ZERO_ID
        self.entries_added = 0
        self.max_deleted_id: StreamId = ZERO_ID
        self.groups: dict[bytes, ConsumerGroup] = {}

    def first_id(self) -> StreamId:
        """The first entry's ID; 0-0 when the stream is empty."""
        return next(iter(self.entries), ZERO_ID)

    def copy(self) -> Stream:
        """A deep copy (COPY, RENAME across shards)."""
        stream = Stream()
        stream.entries = OrderedDict((i, list(fields)) for i, fields in self.entries.items())
        stream.last_id, stream.entries_added = self.last_id, self.entries_added
        stream.max_deleted_id = self.max_deleted_id
        stream.groups = {name: group.copy() for name, group in self.groups.items()}
        return stream

    def estimate_entries_read(self, stream_id: StreamId) -> int:
        """The logical read counter of ``stream_id`` (its distance from the first entry ever
        added), or -1 when it cannot be known: Redis's
        ``streamEstimateDistanceFromFirstEverEntry`` (src/t_stream.c, 7.0)."""
        if not self.entries_added:
            return 0
        if not self.entries and stream_id <= self.last_id:
            return self.entries_added
        if stream_id == self.last_id:
            return self.entries_added
        if stream_id > self.last_id:
            return INVALID_ENTRIES_READ
        first = self.first_id()
        if self.max_deleted_id == ZERO_ID or self.max_deleted_id < first:
            if stream_id < first:
                return self.entries_added - len(self.entries)
            if stream_id == first:
                return self.entries_added - len(self.entries) + 1
        return INVALID_ENTRIES_READ

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _stream, (
            self.entries,
            self.last_id,
            self.entries_added,
            self.max_deleted_id,
            self.groups,
        )


def _stream(
    entries: OrderedDict[StreamId, list[bytes]],
    last_id: StreamId,
    entries_added: int,
    max_deleted_id: StreamId,
    groups: dict[bytes, ConsumerGroup],
) -> Stream:
    """A :class:`Stream` unpickled."""
    stream = Stream()
    stream.entries, stream.last_id, stream.entries_added = entries, last_id, entries_added
    stream.max_deleted_id, stream.groups = max_deleted_id, groups
    return stream


def _pairs(fields: list[bytes]) -> zip[tuple[bytes, bytes]]:
    return zip(fields[::2], fields[1::2], strict=True)


def _entries_json(stream: Stream) -> bytes:
    """The JSON of the entries: moonish.values.plainjson's when every field and value is plain
    (and every entry has fields), else orjson's."""
    made = _stream_entries(stream.entries)
    if made is not None:
        return made
    return orjson.dumps(_entries_value(stream))


def _entries_value(stream: Stream) -> list[Any]:
    return [
        {"id": format_id(i), "fields": [[text(f), text(v)] for f, v in _pairs(fields)]}
        for i, fields in stream.entries.items()
    ]


def _pending_json(stream_id: StreamId, pending: PendingEntry) -> Any:
    return {
        "id": format_id(stream_id),
        "consumer": text(pending.consumer),
        "delivery_time_ms": pending.delivery_time_ms,
        "delivery_count": pending.delivery_count,
    }


def _group_json(name: bytes, group: ConsumerGroup) -> Any:
    return {
        "name": text(name),
        "last_delivered_id": format_id(group.last_id),
        "entries_read": None if group.entries_read == INVALID_ENTRIES_READ else group.entries_read,
        "pending": [
            {
                "id": format_id(i),
                "consumer": text(p.consumer),
                "delivery_time_ms": p.delivery_time_ms,
                "delivery_count": p.delivery_count,
            }
            for i, p in sorted(group.pending.items())
        ],
        "consumers": [
            {"name": text(c), "seen_time_ms": seen} for c, seen in sorted(group.consumers.items())
        ],
    }


def stream_value(stream: Stream) -> Any:
    """The image value of ``stream`` as JSON-ready Python values (the general form of
    :func:`stream_json`)."""
    return {
        "entries": _entries_value(stream),
        "last_id": format_id(stream.last_id),
        "entries_added": stream.entries_added,
        "max_deleted_id": format_id(stream.max_deleted_id),
        "groups": [_group_json(n, g) for n, g in sorted(stream.groups.items())],
    }


def stream_json(stream: Stream) -> bytes:
    """The image value of ``stream`` (module docstring): ``orjson.dumps(stream_value(...))``,
    with the entries joined as bytes when they are plain."""
    groups = (
        orjson.dumps([_group_json(n, g) for n, g in sorted(stream.groups.items())])
        if stream.groups
        else b"[]"
    )
    return (
        b'{"entries":%s,"last_id":"%d-%d","entries_added":%d,"max_deleted_id":"%d-%d",'
        % (
            _entries_json(stream),
            *stream.last_id,
            stream.entries_added,
            *stream.max_deleted_id,
        )
        + b'"groups":%s}' % groups
    )


def stream_from_json(raw: Any, last_id: str | None = None) -> Stream:
    """The inverse of :func:`stream_json`. Also reads the older form of the value, without
    stream counters and groups: the entries list alone (with ``last_id`` from the image's own
    ``"last_id"`` key in lossless images, else the last entry's ID); its ``entries_added`` is
    then the length and ``max_deleted_id`` 0-0, as Redis migrates a stream from an RDB file
    older than 7.0 (src/rdb.c).

    Raises:
        ValueError, KeyError, TypeError: ``raw`` is not a stream image value.
    """
    stream = Stream()
    items = raw if isinstance(raw, list) else raw["entries"]
    for item in items:
        fields: list[bytes] = []
        for f, v in item["fields"]:
            fields += (untext(f), untext(v))
        stream.entries[parse_id_text(item["id"])] = fields
    if isinstance(raw, list):
        stream.last_id = (
            parse_id_text(last_id)
            if last_id is not None
            else next(reversed(stream.entries), ZERO_ID)
        )
        stream.entries_added = len(stream.entries)
        return stream
    stream.last_id = parse_id_text(raw["last_id"])
    stream.entries_added = int(raw["entries_added"])
    stream.max_deleted_id = parse_id_text(raw["max_deleted_id"])
    for item in raw["groups"]:
        read = item["entries_read"]
        group = ConsumerGroup(
            parse_id_text(item["last_delivered_id"]),
            INVALID_ENTRIES_READ if read is None else int(read),
        )
        for pending in item["pending"]:
            group.pending[parse_id_text(pending["id"])] = PendingEntry(
                untext(pending["consumer"]),
                int(pending["delivery_time_ms"]),
                int(pending["delivery_count"]),
            )
        for consumer in item["consumers"]:
            group.consumers[untext(consumer["name"])] = int(consumer["seen_time_ms"])
        if any(p.consumer not in group.consumers for p in group.pending.values()):
            raise ValueError("a pending entry's consumer is not a consumer of its group")
        stream.groups[untext(item["name"])] = group
    return stream
