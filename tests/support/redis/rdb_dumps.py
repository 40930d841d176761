"""A redis-server filled with every type in every encoding redis-server 7.0 writes (the RDB
reader's and the replica connection's tests)."""

from __future__ import annotations

import random

import redis

FAR_MS = 4_102_444_800_123  # 2100-01-01 plus 123 ms


RNG = random.Random(11)


INCOMPRESSIBLE = RNG.randbytes(3000)


LIBRARY = b"#!lua name=rdblib\nredis.register_function('rdbf', function() return 1 end)"


def fill_every_encoding(client: redis.Redis) -> None:
    """Every type in every encoding redis-server 7.0 writes, switching the conversion limits
    between keys (an encoding is chosen when a key is written, kept by SAVE)."""
    ints = [
        0,
        1,
        12,
        13,
        127,
        128,
        -1,
        -4096,
        4095,
        4096,
        -32768,
        32767,
        40000,
        -(2**23),
        2**23,
        2**31 - 1,
        -(2**31),
        2**31,
        2**40,
        2**63 - 1,
        -(2**63),
    ]
    texts = [
        b"a",
        b"",
        b"x" * 63,
        b"y" * 64,
        b"z" * 4095,
        b"w" * 4096,
        b"\x00\xff\xfe",
        b"007",
        b"1.5",
        b"-0",
        b"+1",
        b" 1",
        b"9223372036854775808",
    ]
    elements = [b"%d" % i for i in ints] + texts
    c = client
    # strings: raw, int-encoded, LZF-compressed, incompressible, binary key, empty
    c.set(b"s:raw", b"hello")
    for i in ints:
        c.set(b"s:int:%d" % i, b"%d" % i)
    for t in texts:
        c.set(b"s:text:" + t[:20], t)
    c.set(b"s:lzf", b"abcdefgh" * 2000)
    c.set(b"s:noise", INCOMPRESSIBLE)
    c.set(b"\x00bin\xffkey", b"\x01\x02")
    c.set(b"s:exp", b"v", pxat=FAR_MS)
    # lists: one listpack node, many nodes, compressed nodes, plain nodes
    c.config_set("list-max-listpack-size", "128")
    c.rpush(b"l:small", *elements)
    c.rpush(b"l:one", b"only")
    c.config_set("list-max-listpack-size", "4")
    c.rpush(b"l:nodes", *elements, *elements)
    c.config_set("list-compress-depth", "1")
    c.rpush(b"l:compressed", *[b"element %d " % (i % 7) * 20 for i in range(200)])
    c.config_set("list-compress-depth", "0")
    c.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "100")
    c.rpush(b"l:plain", b"short", b"p" * 500, b"tiny", b"q" * 300, *elements)
    c.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", str(2**30))
    c.config_set("list-max-listpack-size", "-2")
    c.rpush(b"l:exp", b"a", b"b")
    c.pexpireat(b"l:exp", FAR_MS)
    # sets: intset (16, 32, 64 bit), hashtable
    c.config_set("set-max-intset-entries", "512")
    c.sadd(b"set:int16", 1, -2, 300)
    c.sadd(b"set:int32", 1, 2**20, -(2**30))
    c.sadd(b"set:int64", 1, 2**40, -(2**63))
    c.sadd(b"set:text", *texts)
    c.config_set("set-max-intset-entries", "2")
    c.sadd(b"set:bigint", 1, 2, 3, 4)
    c.config_set("set-max-intset-entries", "512")
    c.sadd(b"set:exp", b"m")
    c.pexpireat(b"set:exp", FAR_MS)
    # zsets: listpack, skiplist (binary doubles)
    scores = [
        0.0,
        1.0,
        -1.0,
        1.5,
        1e300,
        -2.5e-10,
        float("inf"),
        float("-inf"),
        3.0,
        2**53,
        0.1,
        12.0,
        127.0,
        -(2**40),
    ]
    members = {e: s for e, s in zip(elements, scores * 3, strict=False)}
    c.config_set("zset-max-listpack-entries", "128")
    c.zadd(b"z:small", members)
    c.config_set("zset-max-listpack-entries", "4")
    c.zadd(b"z:big", members)
    c.config_set("zset-max-listpack-entries", "128")
    c.zadd(b"z:exp", {b"m": 1})
    c.pexpireat(b"z:exp", FAR_MS)
    # hashes: listpack, hashtable
    pairs = dict(zip(elements, reversed(elements), strict=True))
    c.config_set("hash-max-listpack-entries", "128")
    c.config_set("hash-max-listpack-value", "8192")
    c.hset(b"h:small", mapping=pairs)
    c.config_set("hash-max-listpack-entries", "4")
    c.hset(b"h:big", mapping=pairs)
    c.config_set("hash-max-listpack-entries", "128")
    c.config_set("hash-max-listpack-value", "64")
    c.hset(b"h:longvalue", mapping={b"f": b"v" * 100})
    c.hset(b"h:exp", b"f", b"v")
    c.pexpireat(b"h:exp", FAR_MS)
    c.execute_command("FUNCTION", "LOAD", LIBRARY)
