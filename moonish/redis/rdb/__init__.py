"""The RDB file format as Redis writes it (``rdb.c``, docs/rdb-format.md): a streaming reader
(``reader``), value encodings (``values``, ``listpack``), keys as keyspace entries (``keys``,
``streams``), a whole file grouped by shard (``contents``), and DUMP payloads (``dump``). It
decodes bytes into ``moonish.values`` and imports no keyspace, shard or log.
"""
