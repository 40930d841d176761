"""Where a data directory's changes come from, and how far each shard has applied them.

A data directory remembers its source in ``<data_dir>/source.json`` (a checked file, see
moonish.fileio)::

    {"format": "moonish-source", "version": 1, "kind": "aof" | "rdb" | "replica" | "cluster",
     "location": <absolute path of the appendonlydir or RDB file, or host:port (a cluster:
                  the seed node's)>,
     "crc32c": ...}

Importing or capturing another source into it is refused (:class:`SourceMismatchError`).

Each shard stores the position it has applied in its own log, on the last record of every
append (``KvChange.source``, moonish.log.records), so the position is in the log exactly when
the records it covers are: a crash can never separate them. A position is compact UTF-8 JSON:

- ``{"aof": "<file name>", "offset": <bytes>}``: every command of the manifest's files before
  this file, and of this file before byte ``offset``, has been applied (an RDB base file:
  ``offset`` is its size once loaded whole);
- ``{"rdb": "<size>-<crc64 hex>"}``: the RDB file with this identity has been loaded;
- ``{"replid": "<40 hex>", "offset": <replication offset>, "db": <db>}``: a capture has
  applied the replication stream up to this offset, after which the stream's selected db is
  ``db`` (a master continuing a stream sends no ``SELECT`` for the db it was in, so the db is
  part of the position, as Redis's own replicas keep ``repl-stream-db``; ``"db"`` may be
  absent: 0);
- ``{"links": {"<link id>": {"replid", "offset", "db"}, ...}}``: a capture of a Redis Cluster
  (moonish.redis.cluster), one replication link per master: for each link (its id is the node
  id of the master it first followed), every command of that link's stream up to ``offset``
  that touches this shard is in this shard's log.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from moonish.errors import CorruptionError, InvalidArgumentError, LsnNotRetainedError
from moonish.fileio import dump_checked, read_checked, replace_atomically
from moonish.log.format import RecordType
from moonish.log.frames import Frame
from moonish.log.payloads import decode_payload
from moonish.log.reader import ShardReader

SOURCE_NAME = "source.json"
FORMAT = "moonish-source"
VERSION = 1
KINDS = ("aof", "rdb", "replica", "cluster")


class SourceMismatchError(InvalidArgumentError):
    """The data directory was written from another source."""


def encode_position(position: dict[str, Any]) -> bytes:
    """The stored form of a position (compact JSON, members in the order given)."""
    return orjson.dumps(position)


def decode_position(data: bytes, shard_dir: str = "") -> dict[str, Any]:
    """A stored position back as a dict (``{}`` for ``b""``: the shard has none).

    Raises:
        CorruptionError: not a position moonish writes (path: ``shard_dir``).
    """
    if not data:
        return {}
    try:
        position = orjson.loads(data)
    except orjson.JSONDecodeError:
        position = None
    if not isinstance(position, dict) or not (
        {"aof", "offset"} == position.keys()
        or {"rdb"} == position.keys()
        or {"replid", "offset"} == position.keys()
        or {"replid", "offset", "db"} == position.keys()
        or ({"links"} == position.keys() and _links(position["links"]))
    ):
        raise CorruptionError(f"not a source position: {data[:80]!r}", path=shard_dir)
    return position


def _links(links: object) -> bool:
    return isinstance(links, dict) and all(
        isinstance(each, dict) and {"replid", "offset", "db"} == each.keys()
        for each in links.values()
    )


def link_position(data: bytes, shard_dir: str, link: str | None) -> dict[str, Any]:
    """The stored position ``data`` of one stream: with ``link`` (a cluster capture's link),
    that link's ``{"replid", "offset", "db"}`` (``{}``: the shard stores none for it); else
    the whole position (:func:`decode_position`).

    Raises:
        CorruptionError: not a position moonish writes, or a cluster's where a single
            master's is expected and the reverse (path: ``shard_dir``).
    """
    position = decode_position(data, shard_dir)
    if ("links" in position) != (link is not None) and position:
        kind = "a cluster capture's" if "links" in position else "a single source's"
        raise CorruptionError(f"the shard stores {kind} position: {data[:80]!r}", path=shard_dir)
    if link is None:
        return position
    found: dict[str, Any] = position.get("links", {}).get(link, {})
    return found


def describe(position: dict[str, Any]) -> str:
    """A position as people read it: ``appendonly.aof.1.incr.aof@1234``, ``rdb 512-ab12…``,
    ``replid 8c2e…@4096``, or ``none``."""
    if "aof" in position:
        return f"{position['aof']}@{position['offset']}"
    if "rdb" in position:
        return f"rdb {position['rdb']}"
    if "replid" in position:
        return f"replid {position['replid']}@{position['offset']}"
    if "links" in position:
        return ", ".join(
            f"{link[:8]} {describe(each)}" for link, each in sorted(position["links"].items())
        )
    return "none"


def source_path(data_dir: str) -> str:
    return os.path.join(data_dir, SOURCE_NAME)


def load_source(data_dir: str) -> dict[str, Any] | None:
    """The source a data directory remembers (``kind``, ``location``), or ``None``.

    Raises:
        CorruptionError, UnsupportedFormatError: a damaged or unknown ``source.json``.
    """
    document = read_checked(source_path(data_dir), FORMAT, VERSION)
    if document is None:
        return None
    if document.get("kind") not in KINDS or not isinstance(document.get("location"), str):
        raise CorruptionError("source.json without a kind and location", path=data_dir)
    return document


def check_source(data_dir: str, kind: str, location: str) -> bool:
    """Check that ``data_dir`` may receive changes from the source ``kind``/``location``;
    returns whether it already remembers that source (``False``: it remembers none; see
    :func:`unknown_source`, then call :func:`remember_source` before writing anything).

    Raises:
        SourceMismatchError: it remembers another source.
    """
    stored = load_source(data_dir)
    if stored is None:
        return False
    if (stored["kind"], stored["location"]) != (kind, location):
        raise SourceMismatchError(
            f"this data directory follows {_named(stored['kind'], stored['location'])}; "
            f"refusing to add changes from {_named(kind, location)} (use a new data directory)",
            path=data_dir,
        )
    return True


def _named(kind: str, location: str) -> str:
    """A source as a message names it (``the AOF /x``, ``the Redis master at host:port``)."""
    what = {
        "aof": "the AOF",
        "rdb": "the RDB file",
        "replica": "the Redis master at",
        "cluster": "the Redis Cluster of",
    }
    return f"{what.get(kind, f'the {kind}')} {location}"


def unknown_source(data_dir: str, kind: str, location: str) -> SourceMismatchError:
    """The error for shards that hold records but whose data directory names no source
    (written without source positions: they cannot be resumed)."""
    return SourceMismatchError(
        "this data directory holds records but does not say which source they came from "
        f"(no {SOURCE_NAME}: written before imports could be resumed); import the {kind} "
        f"{location} into a new data directory",
        path=data_dir,
    )


def remember_source(data_dir: str, kind: str, location: str) -> None:
    """Write ``source.json`` (atomically) naming the source of ``data_dir``."""
    document = {"format": FORMAT, "version": VERSION, "kind": kind, "location": location}
    replace_atomically(source_path(data_dir), [dump_checked(document)])


def stored_position(shard_dir: str, max_records: int = 10_000) -> tuple[int, dict[str, Any]] | None:
    """The source position a shard's log stores last: ``(lsn, position)`` of the newest
    record that carries one, looked for among the shard's last ``max_records`` records (an
    import or capture stores one on the last record of every append and keeps idle shards
    current with position markers, so it is normally the last record); ``None`` when none of
    them carries one (a shard written by other means, or only snapshots hold it).

    Raises:
        CorruptionError: a damaged record or stored position among them.
    """
    with ShardReader(shard_dir) as reader:
        reader.seek_end()
        end = reader.next_lsn
        try:
            reader.seek(max(1, end - max_records))
        except LsnNotRetainedError as error:  # retention removed the start: from the oldest
            reader.seek(error.oldest_lsn)
        frames: list[Frame] = []
        while batch := reader.poll(4096):
            frames += batch
    for frame in reversed(frames):
        if frame.record_type in (RecordType.KV_CHANGE, RecordType.MESSAGE):
            record = decode_payload(frame.record_type, frame.payload)
            source = getattr(record, "source", b"")
            if source:
                return frame.lsn, decode_position(source, shard_dir)
    return None
