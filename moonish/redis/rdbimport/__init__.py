"""``moonish wal import-rdb``: an RDB snapshot seeds a data directory as ``op: "r"`` rows
(``importer``: ``import_rdb``), its shards loaded in several processes with ``--processes``
(``parallel``).
"""
