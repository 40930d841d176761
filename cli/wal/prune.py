"""``moonish wal prune``: apply the retention policy now, or delete up to a token."""

from __future__ import annotations

import click
import orjson

from moonish.cdc.positions import data_shards, resolve
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import prune_shards
from moonish.state.config import load_config

from .. import options


@click.command("prune")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@options.dry_run(help="Only print what would be deleted, and why.")
@click.option(
    "--before",
    help="Delete the sealed segments wholly at or before this token (or now) instead of "
    "applying the policy.",
)
@click.option("--force", is_flag=True, help="With --before: pass consumers (marking them lost).")
def prune(data_dir: str, dry_run: bool, before: str | None, force: bool) -> None:
    """Apply each shard's retention policy now (whole sealed segments, oldest first; never
    the newest, never what a snapshot or a consumer still needs), printing per shard what it
    deleted (or would) and why, and which consumers it marked lost. --before deletes up to a
    token instead, and refuses to pass a consumer's position without --force.

    Example:

        moonish wal prune data --dry-run
    """
    if force and before is None:
        raise click.UsageError("--force goes with --before")
    shards = data_shards(data_dir)
    cuts = None if before is None else resolve(shards, before).positions
    policies = [RetentionPolicy() for _ in shards]
    if cuts is None:
        configs = [load_config(shard) for shard in shards]
        policies = [c.retention if c is not None else RetentionPolicy() for c in configs]
    for report in prune_shards(shards, policies, before=cuts, force=force, dry_run=dry_run):
        click.echo(orjson.dumps(report.to_json()).decode())
