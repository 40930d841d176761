"""A shard's stream configuration (``<shard_dir>/stream.json``): whether the change stream is
on, its view type (DynamoDB Streams' ``StreamViewType``) and the image size limit.

Records carry the view type in force when they were written, so changing the configuration
affects only later records; nothing is produced retroactively.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import orjson

from moonish.datadir.policy import RetentionPolicy
from moonish.errors import CorruptionError, InvalidArgumentError, UnsupportedFormatError
from moonish.fileio import CHECKSUM_MARK, dump_checked, load_checked, replace_atomically
from moonish.log.lock import lock_shard
from moonish.log.records import ViewType

CONFIG_NAME = "stream.json"
DEFAULT_MAX_VALUE_BYTES = 4096
DEFAULT_SNAPSHOT_EVERY_RECORDS = 100_000
DEFAULT_SNAPSHOT_EVERY_BYTES = 256 * 2**20
DEFAULT_SNAPSHOT_EVERY_S = 3600
DEFAULT_SNAPSHOT_ON_CLOSE_RECORDS = 10_000
"""The default rules of the snapshots a writer takes on its own (moonish.state.autosnapshot)."""


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """Attributes:
    view: the view type; ``ViewType.OFF`` disables the stream (records are still logged,
        for recovery, but readers skip them).
    max_value_bytes: a value whose JSON is larger is left out of images, with a marker.
    retention: what the shard's log keeps (moonish.datadir.retention); the writer applies it
        when it rotates a segment, ``moonish wal prune`` by hand. The default keeps all.
    """

    view: ViewType = ViewType.NEW_AND_OLD_IMAGES
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)

    def __post_init__(self) -> None:
        if self.max_value_bytes < 0:
            raise InvalidArgumentError(f"max_value_bytes must be >= 0, got {self.max_value_bytes}")

    @property
    def old_images(self) -> bool:
        return self.view in (ViewType.OLD_IMAGE, ViewType.NEW_AND_OLD_IMAGES)

    @property
    def new_images(self) -> bool:
        return self.view in (ViewType.NEW_IMAGE, ViewType.NEW_AND_OLD_IMAGES)

    def to_json(self) -> dict[str, object]:
        return {
            "enabled": self.view is not ViewType.OFF,
            "view_type": self.view.name,
            "max_value_bytes": self.max_value_bytes,
        }


def parse_view(name: str) -> ViewType:
    """``KEYS_ONLY``, ``NEW_IMAGE``, ``OLD_IMAGE``, ``NEW_AND_OLD_IMAGES`` or ``OFF``.

    Raises:
        InvalidArgumentError: any other name.
    """
    try:
        return ViewType[name.upper()]
    except KeyError:
        names = ", ".join(view.name for view in ViewType)
        raise InvalidArgumentError(f"unknown view type {name!r}; one of {names}") from None


FORMAT, VERSION = "moonish-stream", 2
_LEGACY_KEYS = {"enabled", "view_type", "max_value_bytes"}


def load_config(shard_dir: str) -> StreamConfig | None:
    """The stored configuration, or ``None`` when the shard has none yet.

    The file carries a crc32c of its bytes (moonish.fileio, ``dump_checked``), checked before
    anything in it is believed. A file written before format version 2 (exactly ``enabled``,
    ``view_type`` and ``max_value_bytes``, no checksum) is read too; the next
    ``ShardWriter`` rewrites it with one (:func:`upgrade_config`).

    Raises:
        CorruptionError: a checksum that does not match, or fields that are not a
            configuration (path in the error).
        UnsupportedFormatError: another format or version, under a valid checksum.
    """
    loaded = _load(shard_dir)
    return loaded[0] if loaded is not None else None


def upgrade_config(shard_dir: str) -> None:
    """Rewrite a configuration written before format version 2 (no checksum) with one."""
    loaded = _load(shard_dir)
    if loaded is not None and loaded[1]:
        store_config(shard_dir, loaded[0])


def _load(shard_dir: str) -> tuple[StreamConfig, bool] | None:
    """``(configuration, whether it is of the old unchecked kind)``, or ``None``."""
    path = os.path.join(shard_dir, CONFIG_NAME)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return None
    legacy = CHECKSUM_MARK not in data
    if legacy:
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CorruptionError(f"unreadable stream configuration: {exc}", path=path) from None
        if not isinstance(document, dict) or set(document) != _LEGACY_KEYS:
            raise CorruptionError(
                "stream configuration without a checksum, and not one of those written before "
                "format version 2",
                path=path,
            )
    else:
        document = load_checked(data, path)
        if document.get("format") != FORMAT or document.get("version") != VERSION:
            raise UnsupportedFormatError(
                f"stream configuration is not {FORMAT} version {VERSION}", path=path
            )
    try:
        retention = RetentionPolicy.from_json(document.get("retention", {}))
        config = StreamConfig(
            ViewType[document["view_type"]], document["max_value_bytes"], retention
        )
        if not isinstance(config.max_value_bytes, int) or document["enabled"] != (
            config.view is not ViewType.OFF
        ):
            raise ValueError(
                f"max_value_bytes {config.max_value_bytes!r}, enabled "
                f"{document['enabled']!r} with view {config.view.name}"
            )
    except (KeyError, TypeError, ValueError, InvalidArgumentError) as exc:
        raise CorruptionError(f"bad stream configuration: {exc!r}", path=path) from None
    return config, legacy


def store_config(shard_dir: str, config: StreamConfig) -> None:
    """Write the configuration atomically, with its checksum. The retention policy is the
    member ``retention`` (left out while it keeps everything, so files without one read the
    same by builds before it)."""
    document: dict[str, object] = {"format": FORMAT, "version": VERSION, **config.to_json()}
    if config.retention != RetentionPolicy():
        document["retention"] = config.retention.to_json()
    replace_atomically(os.path.join(shard_dir, CONFIG_NAME), [dump_checked(document)])


def store_retention(shard_dir: str, policy: RetentionPolicy) -> StreamConfig:
    """Set the retention policy of a shard that has a stream configuration (``moonish wal
    retention``); returns the configuration now stored. Like ``wal stream``, it takes the
    shard's writer lock: a running writer keeps the policy it opened with (use
    ``ShardWriter.set_retention`` there).

    Raises:
        InvalidArgumentError: the shard has no stream configuration (a log written without
            keyspace tracking: call moonish.datadir.retention.prune with a policy instead).
        WriterLockedError: a writer holds the shard.
        CorruptionError: the stored configuration is damaged.
    """
    fd = lock_shard(shard_dir)
    try:
        config = load_config(shard_dir)
        if config is None:
            raise InvalidArgumentError(
                "this shard has no stream configuration (written without keyspace tracking)",
                path=shard_dir,
            )
        config = replace(config, retention=policy)
        store_config(shard_dir, config)
        return config
    finally:
        os.close(fd)
