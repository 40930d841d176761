"""``moonish wal capture``: following a Redis master as its replica (``runner``: ``capture``),
applying the replication stream to the shards (``apply``), the status file and report
(``status``), and the shards written by worker processes (``workers``).
"""
