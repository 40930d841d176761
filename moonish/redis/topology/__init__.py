"""A Redis Cluster's topology: which node owns which hash slots, its replicas, its config epoch,
and the slots in migration (docs/design/cluster-capture.md §1)."""
