"""Redis commands onto a data directory's shards, shared by the imports and the live
capture: routing by hash slot with atomic batches across shards (``router``: ``Router``),
which arguments of a command are keys (``commands``), where a data directory's changes come
from and how far each shard has applied them (``sources``), opening the shards for a source
(``shards``), the checks of a target data directory (``target``), and commands across shards
of several worker processes (``exchange``).
"""
