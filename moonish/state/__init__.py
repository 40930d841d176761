"""Keyspace state on the write path: Redis values, Redis write-command semantics, images,
snapshots and the stream (view type) configuration of a shard."""
