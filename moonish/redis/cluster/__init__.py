"""A Redis Cluster as one source: one replication link per master into one data directory's
shards (docs/redis-source.md, "A Redis Cluster"; docs/design/cluster-capture.md)."""
