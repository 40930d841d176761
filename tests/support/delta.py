"""What a Delta table's log says, read from its JSON commits (Delta protocol, "Actions")."""

from __future__ import annotations

from pathlib import Path

import orjson


def txn_versions(table: Path, app_id: str) -> list[int]:
    """The versions (batch ids) of ``app_id``'s ``txn`` actions in the table's log, in commit
    order: one per commit that carried one."""
    versions = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_bytes().splitlines():
            action = orjson.loads(line)
            if "txn" in action and action["txn"]["appId"] == app_id:
                versions.append(action["txn"]["version"])
    return versions
