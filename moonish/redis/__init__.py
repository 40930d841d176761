"""Redis as a source. Its formats sit below the keyspace and decode bytes: the RDB file
(``rdb``) and the replication protocol (``replication``). Above the keyspace: routing commands
onto shards by hash slot, with source positions (``routing``), and the three ways in, each a
pipeline of its own: the append-only file (``aof``: ``wal import-aof``), an RDB snapshot
(``rdbimport``: ``wal import-rdb``) and a live master (``capture``: ``wal capture``).
"""
