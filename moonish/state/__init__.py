"""One shard's keyspace on the write path: ``ShardWriter`` (``shard``) pairs a WAL writer with
the keyspace (``keyspace``), so that every record says what a write did to its key
(``c``/``u``/``d``) with images per the stream view type (``config``). Redis's write
commands are ``commands``; around them: expiry (``expiry``, hash-field TTLs in ``fieldttl``),
function libraries (``libraries``), snapshots (``snapshot``), rebuilding the keyspace when a
writer opens (``rebuild``), setting keys to given values for RDB loads and resyncs (``load``),
and shards without a log for work split over processes (``shadow``).

It imports ``moonish.log``, ``moonish.datadir`` (retention policies), ``moonish.values`` and
``moonish.redis.rdb`` (RESTORE's DUMP payloads).
"""
