"""Redis's write commands with Redis's semantics, replies and error texts: the command table
and key positions (``execute``), argument parsing with Redis's rules (``parse``), and one
module per family (strings, bits, keys, hashes/sets/lists, hash-field TTLs, sorted sets,
geo, HyperLogLog, streams, stream groups, SORT, RESTORE, FUNCTION). A handler runs on a
keyspace ``Access`` and returns Redis's reply; it imports the keyspace, libraries and
field TTLs of ``moonish.state``, ``moonish.values``, and ``moonish.redis.rdb`` for DUMP
payloads.
"""
