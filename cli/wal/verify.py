"""``moonish wal verify``: check every byte of a shard (or of every shard of a data dir)."""

from __future__ import annotations

import click

from moonish.cdc import shard_read


@click.command("verify")
@click.argument("wal_dir", type=click.Path(exists=True, file_okay=False))
def verify(wal_dir: str) -> None:
    """Check headers, CRCs, LSN continuity, batches, payloads, indexes and the log's end.

    Exits 0 and prints one line per shard when sound; otherwise exits 4 with the file, byte
    offset and LSN of the first damage. A torn tail at the end of the newest segment (what a
    writer that died mid-append leaves) is reported but is not damage, with the LSNs its frame
    headers name (the next writer discards them); discarded LSNs are reported.

    Example:

        moonish wal verify data
    """
    from moonish.log.verify import verify_shard

    for path in shard_read.shard_dirs(wal_dir):
        r = verify_shard(path)
        span = f"LSN {r.first_lsn}..{r.last_lsn}" if r.records else "empty"
        torn = f", torn tail of {r.torn_tail_bytes} bytes" if r.torn_tail_bytes else ""
        if r.torn_tail_lsns is not None:
            first, last = r.torn_tail_lsns
            torn += f" naming LSNs {first}..{last} (the next writer discards them)"
        cut = "".join(f", LSNs {a}..{b} discarded" for a, b in r.discarded)
        click.echo(
            f"ok {path}: shard {r.shard}, {r.records} records, {span}, {r.segments} segments, "
            f"{r.bytes} bytes, {r.index_entries} index entries{torn}{cut}, next LSN {r.next_lsn}"
        )
