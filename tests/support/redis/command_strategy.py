"""Random Redis write commands (hypothesis) over a few keys, fields and values: what tests compare
with a real redis-server, command after command."""

from __future__ import annotations

from hypothesis import strategies as st

# -- random command sequences ---------------------------------------------------------------
KEYS = [b"k0", b"k1", b"{t}k2", b"\xffk3"]


FIELDS = [b"f0", b"f1", b"f2"]


VALUES = [b"v0", b"1", b"-7", b"2.5", b"", b"\xc3\xa9"]


FAR = b"4102444800000"  # 2100-01-01 in ms: never expires during a test


key = st.sampled_from(KEYS)


FAR_ARG = st.just(FAR)


field = st.sampled_from(FIELDS)


value = st.sampled_from(VALUES)


number = st.sampled_from([b"0", b"1", b"3", b"-2", b"x"])


score = st.sampled_from([b"1", b"2.5", b"-1", b"inf", b"nan"])


stream_id = st.sampled_from([b"1-1", b"2-0", b"2-*", b"0-0", b"5-3", b"3"])


bit = st.sampled_from([b"0", b"1", b"2"])


bitop = st.sampled_from([b"AND", b"OR", b"XOR", b"NOT", b"nand"])


overflow = st.sampled_from([b"WRAP", b"SAT", b"FAIL"])


bitfield_type = st.sampled_from([b"u1", b"i3", b"u8", b"i8", b"i64", b"u63", b"u64"])


bit_offset = st.sampled_from([b"0", b"5", b"#1", b"-1"])


score_bound = st.sampled_from([b"1", b"(1", b"2.5", b"-inf", b"+inf", b"(-1", b"x"])


lex_bound = st.sampled_from([b"-", b"+", b"[v0", b"(v0", b"[1", b"(", b"x"])


store = st.sampled_from([b"STORE", b"store"])


weight = st.sampled_from([b"1", b"-1", b"0.5", b"inf", b"0", b"x"])


COMMAND = st.one_of(
    st.tuples(st.just(b"SET"), key, value),
    st.tuples(st.just(b"SET"), key, value, st.sampled_from([b"NX", b"XX", b"GET", b"KEEPTTL"])),
    st.tuples(st.just(b"SET"), key, value, st.just(b"PXAT"), st.just(FAR)),
    st.tuples(st.sampled_from([b"SETNX", b"GETSET", b"APPEND"]), key, value),
    st.tuples(st.sampled_from([b"GETDEL", b"INCR", b"DECR", b"PERSIST"]), key),
    st.tuples(st.sampled_from([b"INCRBY", b"DECRBY"]), key, number),
    st.tuples(st.just(b"INCRBYFLOAT"), key, st.sampled_from([b"1.5", b"0.1", b"-3", b"x"])),
    st.tuples(st.sampled_from([b"MSET", b"MSETNX"]), key, value, key, value),
    st.tuples(st.sampled_from([b"HSET", b"HSETNX", b"HMSET"]), key, field, value),
    st.tuples(st.just(b"HSET"), key, field, value, field, value),
    st.tuples(st.just(b"HDEL"), key, field, field),
    st.tuples(st.just(b"HINCRBY"), key, field, number),
    st.tuples(st.just(b"HINCRBYFLOAT"), key, field, st.sampled_from([b"0.5", b"2", b"z"])),
    st.tuples(st.sampled_from([b"LPUSH", b"RPUSH", b"LPUSHX", b"RPUSHX"]), key, value, value),
    st.tuples(st.sampled_from([b"LPOP", b"RPOP"]), key),
    st.tuples(st.sampled_from([b"LPOP", b"RPOP"]), key, st.sampled_from([b"0", b"1", b"2"])),
    st.tuples(st.just(b"LSET"), key, st.sampled_from([b"0", b"-1", b"5"]), value),
    st.tuples(st.just(b"LREM"), key, st.sampled_from([b"0", b"1", b"-1"]), value),
    st.tuples(
        st.just(b"LTRIM"),
        key,
        st.sampled_from([b"0", b"1", b"-2"]),
        st.sampled_from([b"0", b"-1", b"1"]),
    ),
    st.tuples(st.sampled_from([b"SADD", b"SREM"]), key, value, value),
    st.tuples(st.just(b"SMOVE"), key, key, value),
    st.tuples(st.just(b"ZADD"), key, score, value),
    st.tuples(
        st.just(b"ZADD"),
        key,
        st.sampled_from([b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR"]),
        score,
        value,
    ),
    st.tuples(st.just(b"ZINCRBY"), key, score, value),
    st.tuples(st.just(b"ZREM"), key, value),
    st.tuples(st.sampled_from([b"ZPOPMIN", b"ZPOPMAX"]), key),
    st.tuples(st.sampled_from([b"ZPOPMIN", b"ZPOPMAX"]), key, st.sampled_from([b"2", b"0"])),
    st.tuples(st.just(b"XADD"), key, stream_id, field, value),
    st.tuples(
        st.just(b"XADD"),
        key,
        st.just(b"MAXLEN"),
        st.sampled_from([b"1", b"2"]),
        stream_id,
        field,
        value,
    ),
    st.tuples(st.just(b"XDEL"), key, stream_id),
    st.tuples(st.just(b"XTRIM"), key, st.just(b"MAXLEN"), st.sampled_from([b"0", b"1"])),
    st.tuples(st.sampled_from([b"DEL", b"UNLINK"]), key, key),
    st.tuples(st.sampled_from([b"RENAME", b"RENAMENX", b"COPY", b"LMOVE"]), key, key),
    st.tuples(st.just(b"COPY"), key, key, st.just(b"REPLACE")),
    st.tuples(
        st.just(b"LMOVE"),
        key,
        key,
        st.sampled_from([b"LEFT", b"RIGHT"]),
        st.sampled_from([b"LEFT", b"RIGHT"]),
    ),
    st.tuples(st.sampled_from([b"PEXPIREAT", b"EXPIREAT"]), key, st.just(FAR)),
    st.tuples(
        st.just(b"PEXPIREAT"), key, st.just(FAR), st.sampled_from([b"NX", b"XX", b"GT", b"LT"])
    ),
    st.tuples(st.just(b"PEXPIREAT"), key, st.just(b"1000")),  # in the past: removes the key
    st.tuples(st.just(b"FLUSHDB")),
    # refusals: Redis's checks, in Redis's order
    st.tuples(st.just(b"SET"), key, value, st.just(b"NX"), st.just(b"XX")),
    st.tuples(st.just(b"SET"), key, value, st.just(b"EX"), st.sampled_from([b"0", b"x", b"-5"])),
    st.tuples(st.sampled_from([b"HSET", b"LPUSH", b"SADD", b"ZADD", b"GETDEL", b"XADD"]), key),
    st.tuples(
        st.just(b"ZADD"),
        key,
        st.sampled_from([b"NX", b"GT"]),
        st.sampled_from([b"XX", b"LT", b"INCR"]),
        score,
        value,
    ),
    st.tuples(st.just(b"ZADD"), key, st.just(b"INCR"), score, value, score, value),
    st.tuples(st.just(b"ZADD"), key, score),
    st.tuples(st.just(b"INCRBY"), key, st.just(b"9223372036854775807")),
    st.tuples(st.sampled_from([b"LPOP", b"ZPOPMIN"]), key, st.just(b"-1")),
    st.tuples(st.just(b"EXPIRE"), key, st.just(b"-1")),  # in the past: removes the key
    st.tuples(st.just(b"PEXPIREAT"), key, FAR_ARG, st.just(b"NX"), st.just(b"XX")),
    # more of the command set
    st.tuples(st.just(b"XADD"), key, st.just(b"NOMKSTREAM"), stream_id, field, value),
    st.tuples(st.just(b"XTRIM"), key, st.just(b"MINID"), st.sampled_from([b"2-0", b"0"])),
    st.tuples(st.just(b"LINSERT"), key, st.sampled_from([b"BEFORE", b"AFTER", b"X"]), value, value),
    st.tuples(st.just(b"RPOPLPUSH"), key, key),
    st.tuples(st.sampled_from([b"SETEX", b"PSETEX"]), key, st.just(b"0"), value),
    # bitmaps and string ranges
    st.tuples(st.just(b"SETRANGE"), key, st.sampled_from([b"0", b"1", b"3", b"-1", b"x"]), value),
    st.tuples(st.just(b"SETBIT"), key, st.sampled_from([b"0", b"7", b"9", b"x"]), bit),
    st.tuples(st.just(b"BITOP"), bitop, key, key, key),
    st.tuples(st.just(b"BITOP"), st.just(b"NOT"), key, key),
    st.tuples(
        st.just(b"BITFIELD"),
        key,
        st.just(b"OVERFLOW"),
        overflow,
        st.sampled_from([b"INCRBY", b"SET", b"GET"]),
        bitfield_type,
        bit_offset,
        number,
    ),
    st.tuples(
        st.just(b"BITFIELD"),
        key,
        st.sampled_from([b"SET", b"INCRBY"]),
        bitfield_type,
        bit_offset,
        number,
        st.just(b"GET"),
        bitfield_type,
        bit_offset,
    ),
    # set and sorted set stores, ranges
    st.tuples(st.sampled_from([b"SINTERSTORE", b"SUNIONSTORE", b"SDIFFSTORE"]), key, key, key),
    st.tuples(st.just(b"ZREMRANGEBYSCORE"), key, score_bound, score_bound),
    st.tuples(st.just(b"ZREMRANGEBYRANK"), key, number, number),
    st.tuples(st.just(b"ZREMRANGEBYLEX"), key, lex_bound, lex_bound),
    st.tuples(
        st.sampled_from([b"ZUNIONSTORE", b"ZINTERSTORE", b"ZDIFFSTORE"]),
        key,
        st.sampled_from([b"1", b"2"]),
        key,
        key,
    ),
    st.tuples(
        st.sampled_from([b"ZUNIONSTORE", b"ZINTERSTORE"]),
        key,
        st.just(b"2"),
        key,
        key,
        st.just(b"WEIGHTS"),
        weight,
        weight,
        st.just(b"AGGREGATE"),
        st.sampled_from([b"SUM", b"MIN", b"MAX"]),
    ),
    st.tuples(st.just(b"ZRANGESTORE"), key, key, number, number),
    st.tuples(st.just(b"ZRANGESTORE"), key, key, score_bound, score_bound, st.just(b"BYSCORE")),
    st.tuples(
        st.just(b"ZRANGESTORE"),
        key,
        key,
        lex_bound,
        lex_bound,
        st.just(b"BYLEX"),
        st.just(b"REV"),
        st.just(b"LIMIT"),
        number,
        number,
    ),
    st.tuples(st.just(b"SORT"), key, st.sampled_from([b"ALPHA", b"DESC", b"ASC"]), store, key),
    st.tuples(
        st.just(b"SORT"),
        key,
        st.just(b"BY"),
        st.sampled_from([b"k*", b"nosort", b"k*->f0"]),
        st.just(b"GET"),
        st.sampled_from([b"#", b"k*", b"{t}k*->f1"]),
        st.just(b"LIMIT"),
        number,
        number,
        store,
        key,
    ),
    st.tuples(st.just(b"XSETID"), key, stream_id),
    # stream consumer groups (every value and time: tests/state/commands/
    # test_streams_match_redis.py)
    st.tuples(
        st.just(b"XGROUP"),
        st.sampled_from([b"CREATE", b"SETID"]),
        key,
        field,
        st.sampled_from([b"$", b"0", b"2-0", b"x"]),
        st.sampled_from([b"MKSTREAM", b"ENTRIESREAD"]),
        st.sampled_from([b"1", b"-1", b"MKSTREAM"]),
    ),
    st.tuples(
        st.just(b"XGROUP"),
        st.sampled_from([b"DESTROY", b"CREATECONSUMER", b"DELCONSUMER", b"FOO"]),
        key,
        field,
        value,
    ),
    st.tuples(
        st.just(b"XCLAIM"),
        key,
        field,
        value,
        st.sampled_from([b"0", b"x"]),
        stream_id,
        st.sampled_from([b"FORCE", b"JUSTID", b"LASTID", b"TIME"]),
        st.sampled_from([b"FORCE", b"5-0", b"4102444800000"]),
    ),
    st.tuples(st.just(b"XGROUP"), st.just(b"DESTROY"), key, field),
    st.tuples(st.just(b"XACK"), key, field, stream_id, stream_id),
    st.tuples(st.just(b"PFADD"), key, value, value),
    st.tuples(st.just(b"PFCOUNT"), key),
    st.tuples(st.sampled_from([b"PFMERGE", b"PFCOUNT"]), key, key, key),
    st.tuples(st.just(b"MOVE"), key, st.sampled_from([b"0", b"1"])),
    st.tuples(st.just(b"SWAPDB"), st.just(b"0"), st.sampled_from([b"1", b"0"])),
)


# -- hash fields with expiry times (Redis 7.4, Valkey 9) ----------------------------------------
_fields = st.lists(field, min_size=1, max_size=3)


def _with_fields(head: tuple[bytes, ...], fields: list[bytes], values: bool) -> tuple[bytes, ...]:
    """``head FIELDS n field [value] ...`` (a value per field with ``values``)."""
    tail = [x for f in fields for x in ((f, f + b"v") if values else (f,))]
    return (*head, b"FIELDS", b"%d" % len(fields), *tail)


_field_time = st.sampled_from([FAR, b"4102444900000", b"1000000000000"])  # later, past
_setex_time = st.sampled_from(
    [
        (),
        (b"EX", b"100000"),
        (b"PX", b"100000000"),
        (b"EXAT", b"4102444800"),
        (b"PXAT", FAR),
        (b"PXAT", b"1000000000000"),
        (b"KEEPTTL",),
    ]
)
_getex_time = st.sampled_from(
    [(), (b"EX", b"100000"), (b"PXAT", FAR), (b"PXAT", b"1000000000000"), (b"PERSIST",)]
)


HASH_FIELD_COMMAND = st.one_of(
    st.builds(
        lambda k, t, c, fs: _with_fields((b"HPEXPIREAT", k, t, *c), fs, False),
        key,
        _field_time,
        st.sampled_from([(), (b"NX",), (b"XX",), (b"GT",), (b"LT",)]),
        _fields,
    ),
    st.builds(lambda k, fs: _with_fields((b"HEXPIRE", k, b"100000"), fs, False), key, _fields),
    st.builds(lambda k, fs: _with_fields((b"HPERSIST", k), fs, False), key, _fields),
    st.builds(
        lambda k, c, fc, t, fs: _with_fields((b"HSETEX", k, *c, *fc, *t), fs, True),
        key,
        st.sampled_from([(), (b"NX",), (b"XX",)]),
        st.sampled_from([(), (b"FNX",), (b"FXX",)]),
        _setex_time,
        _fields,
    ),
    st.builds(lambda k, fs: _with_fields((b"HGETDEL", k), fs, False), key, _fields),
    st.builds(
        lambda k, t, fs: _with_fields((b"HGETEX", k, *t), fs, False), key, _getex_time, _fields
    ),
)
"""Random commands on hash fields' expiry times, the HEXPIRE family's and Valkey 9's (HSETEX
with every option, HGETDEL, HGETEX): times far ahead or long past, never passing in a test."""
