"""The source filter a data directory was written with, and what it has left out.

``<data_dir>/filter.json`` (a checked file, moonish.fileio) holds the :class:`FilterSpec` and
the counts of what it left out::

    {"format": "moonish-filter", "version": 1,
     "include_keys": [...], "exclude_keys": [...], "dbs": [...] | null, "types": [...] | null,
     "commands_filtered": {"<rule>": <count>, ...}, "keys_filtered": {"<rule>": <count>, ...},
     "crc32c": ...}

It is written before a data directory's first record, so every record of the directory was
filtered alike. A later import or capture with another filter is refused
(:class:`FilterMismatchError`): a key that a new filter kept would have no known state, and one
it left out would keep a stale one. Counts add up over runs; a run stopped by a crash or a kill
loses its counts since the last save (they are reports, not positions).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from moonish.errors import InvalidArgumentError
from moonish.fileio import dump_checked, read_checked, replace_atomically
from moonish.redis.routing.keyfilter import NO_FILTER, FilterSpec, KeyFilter

FILTER_NAME = "filter.json"
FORMAT = "moonish-filter"
VERSION = 1


class FilterMismatchError(InvalidArgumentError):
    """The filter given differs from the one the data directory was written with."""


def filter_path(data_dir: str) -> str:
    return os.path.join(data_dir, FILTER_NAME)


def load_filter(data_dir: str) -> tuple[FilterSpec, Counter[str], Counter[str]] | None:
    """The data directory's filter and its counts (commands, keys left out, by rule), or
    ``None`` when it was written without one.

    Raises:
        CorruptionError, UnsupportedFormatError: a damaged or unknown ``filter.json``.
        InvalidArgumentError: a filter this build refuses (a bad pattern).
    """
    document = read_checked(filter_path(data_dir), FORMAT, VERSION)
    if document is None:
        return None
    return (
        FilterSpec.from_json(document),
        Counter(document.get("commands_filtered") or {}),
        Counter(document.get("keys_filtered") or {}),
    )


class FilterFile:
    """The filter of one run over a data directory, checked against the stored one.

    Args:
        data_dir: the data directory.
        spec: this run's filter (``NO_FILTER``: none).
        fresh: whether the data directory holds no record yet (a filter may then be set).

    Attributes:
        key_filter: the compiled filter whose counts this run adds (:meth:`save`).

    Raises:
        FilterMismatchError: the data directory was written with another filter (or with
            none, and holds records).
        CorruptionError, UnsupportedFormatError: a damaged or unknown ``filter.json``.
    """

    def __init__(self, data_dir: str, spec: FilterSpec, fresh: bool) -> None:
        self.data_dir = data_dir
        stored = load_filter(data_dir)
        self.commands: Counter[str] = Counter()
        self.keys: Counter[str] = Counter()
        if stored is not None:
            if stored[0] != spec:
                raise FilterMismatchError(
                    f"this data directory was written with the filter {_shown(stored[0])}; "
                    f"this run's is {_shown(spec)}: a key the filters treat differently would "
                    "have a stale or unknown state (use a new data directory)",
                    path=data_dir,
                )
            _, self.commands, self.keys = stored
        elif spec != NO_FILTER and not fresh:
            raise FilterMismatchError(
                f"this data directory holds records written without a filter; refusing to add "
                f"changes under the filter {_shown(spec)} (use a new data directory)",
                path=data_dir,
            )
        self.key_filter = KeyFilter(spec)
        self.stored = stored is not None
        if spec != NO_FILTER and not self.stored:
            self.save(Counter())

    def save(self, run: Counter[str]) -> None:
        """Write ``filter.json`` (atomically): the spec, and the counts stored when this run
        began plus ``run``'s (this run's counts so far, as
        :func:`~moonish.redis.routing.keyfilter.filtered_counts` gives them: loaded keys as
        ``keys:<rule>``); nothing for a run without a filter."""
        spec = self.key_filter.spec
        if spec == NO_FILTER:
            return
        commands, keys = Counter(self.commands), Counter(self.keys)
        for rule, count in run.items():
            if rule.startswith("keys:"):
                keys[rule[len("keys:") :]] += count
            else:
                commands[rule] += count
        document: dict[str, Any] = {"format": FORMAT, "version": VERSION, **spec.to_json()}
        document["commands_filtered"] = dict(sorted(commands.items()))
        document["keys_filtered"] = dict(sorted(keys.items()))
        replace_atomically(filter_path(self.data_dir), [dump_checked(document)])
        self.stored = True


def _shown(spec: FilterSpec) -> str:
    if spec == NO_FILTER:
        return "none"
    members = {name: value for name, value in spec.to_json().items() if value}
    return ", ".join(f"{name}={value}" for name, value in members.items())
