"""A data directory of shards (``shard-<k>``): its layout and shared locks (``layout``), the
named consumers whose positions pin the log (``consumers``), the retention policy (``policy``),
and retention, which removes whole sealed segments no consumer or snapshot needs
(``retention``). It imports ``moonish.log``.
"""
