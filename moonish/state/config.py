"""A shard's stream configuration (``<shard_dir>/stream.json``): whether the change stream is
on, its view type (DynamoDB Streams' ``StreamViewType``) and the image size limit.

Records carry the view type in force when they were written, so changing the configuration
affects only later records; nothing is produced retroactively.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import orjson

from moonish.errors import CorruptionError, InvalidArgumentError
from moonish.fileio import replace_atomically
from moonish.log.records import ViewType

CONFIG_NAME = "stream.json"
DEFAULT_MAX_VALUE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """Attributes:
    view: the view type; ``ViewType.OFF`` disables the stream (records are still logged,
        for recovery, but readers skip them).
    max_value_bytes: a value whose JSON is larger is left out of images, with a marker.
    """

    view: ViewType = ViewType.NEW_AND_OLD_IMAGES
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES

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


def load_config(shard_dir: str) -> StreamConfig | None:
    """The stored configuration, or ``None`` when the shard has none yet.

    Raises:
        CorruptionError: the file is not a configuration.
    """
    path = os.path.join(shard_dir, CONFIG_NAME)
    try:
        with open(path, "rb") as file:
            data = orjson.loads(file.read())
        return StreamConfig(ViewType[data["view_type"]], int(data["max_value_bytes"]))
    except FileNotFoundError:
        return None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptionError(f"unreadable stream configuration: {exc}", path=path) from None


def store_config(shard_dir: str, config: StreamConfig) -> None:
    """Write the configuration atomically."""
    data = orjson.dumps(config.to_json(), option=orjson.OPT_INDENT_2) + b"\n"
    replace_atomically(os.path.join(shard_dir, CONFIG_NAME), [data])
