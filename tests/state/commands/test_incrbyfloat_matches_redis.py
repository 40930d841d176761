"""INCRBYFLOAT and HINCRBYFLOAT against a real redis-server, byte for byte.

Redis 7 reads both operands with ``strtold`` into an x86-64 ``long double`` (64-bit
significand), adds in long double and writes ``%.17Lf`` with trailing zeros removed
(src/t_string.c ``incrbyfloatCommand``, src/t_hash.c ``hincrbyfloatCommand``, src/util.c
``string2ld`` / ``ld2string``). moonish emulates that with integers
(:mod:`moonish.state.commands.parse`); these tests send the same commands to both and compare the
stored bytes (or the error text).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

import moonish
from moonish.clock import SYSTEM_CLOCK
from moonish.errors import CommandError
from moonish.log.writer import FsyncPolicy, WriterOptions
from tests.support.servers.redis_server import redis_server

pytestmark = pytest.mark.redis

TWO_POW_M64 = "0.0000000000000000000542101086242752217003726400434970855712890625"  # 2**-64

# (value SET before, or None for a missing key; the increment)
CASES: list[tuple[str | None, str]] = [
    # int64 extremes and fractions: the sums need more than 64 significand bits
    ("9223372036854775807", "1.5"),
    ("9223372036854775807", "0.5"),
    ("9223372036854775807", "1"),
    ("9223372036854775806", "0.5"),
    ("-9223372036854775808", "-0.5"),
    ("-9223372036854775808", "-1.5"),
    ("18446744073709551615", "1"),
    ("18446744073709551615", "0.5"),
    ("18446744073709551616", "0.5"),
    ("4611686018427387903", "0.25"),
    ("4611686018427387903", "0.75"),
    # doubles' limits are nothing special in long double
    ("1e308", "1e308"),
    ("1.7976931348623157e308", "1.7976931348623157e308"),
    ("-1e308", "-1e308"),
    ("5e-324", "0"),
    ("4.9406564584124654e-324", "5e-324"),
    # decimal fractions
    ("0.1", "0.2"),
    ("0.3", "-0.1"),
    ("1.1", "2.2"),
    ("10.5", "0.1"),
    ("-2.5", "2.5"),
    # negative zero and negative numbers that print as zero
    ("-0", "0"),
    ("-0", "-0"),
    ("0", "-0"),
    ("-0.0", "-0.0"),
    ("1", "-1"),
    ("-1e-30", "0"),
    ("-0.000000000000000004", "0"),
    ("-0.000000000000000005", "0"),
    ("-0.000000000000000006", "0"),
    ("0.000000000000000005", "0"),
    ("0.000000000000000015", "0"),
    # many digits
    ("3.14159265358979323846264338327950288", "2.71828182845904523536028747135266250"),
    ("0.1234567890123456789012345", "0"),
    ("12345678901234567890.123456789", "0.000000000000000001"),
    ("1." + "0" * 5117, "0"),  # 5119 bytes: string2ld takes it
    ("1." + "0" * 5118, "0"),  # 5120 bytes: refused
    ("0", "1." + "0" * 5118),
    # the last significand bits, and strtold's ties (to even)
    ("1", "1e-19"),
    ("1", TWO_POW_M64),  # 1 + 2**-64 is a tie: even is 1
    ("1", TWO_POW_M64 + "1"),  # just above the tie: 1 + 2**-63
    ("1", "0.0000000000000000001626303258728256651011179201304912567138671875"),  # 3 * 2**-64
    ("1", "1.0842021724855044340e-19"),
    ("2", "2.168404344971008868e-19"),
    ("1", "0.00000000000000001"),
    ("0.5", "0.000000000000000005"),
    # %.17Lf ties (glibc rounds half to even)
    (None, "0.000003814697265625"),  # 2**-18
    (None, "0.000011444091796875"),  # 3 * 2**-18
    (None, "-0.000011444091796875"),
    (None, "0.00000762939453125"),  # 2**-17: no tie
    # subnormal long doubles and underflow
    ("1e-4940", "1e-4940"),
    ("0x1p-16445", "0"),
    ("0x1p-16446", "0"),  # rounds to zero: refused
    ("3.6e-4951", "0"),
    ("1e-4951", "0"),
    ("1e-5000", "0"),
    ("0e-99999", "1"),
    ("0e99999999999999999999", "1"),
    ("1e-99999999999999999999", "0"),
    # huge exponents and overflow
    ("1e4000", "1"),
    ("-1e4000", "1e3999"),
    ("1e4932", "0"),
    ("1e4932", "1e4932"),
    ("-1e4932", "-1e4932"),
    ("1.18973149535723176502e4932", "0"),
    ("1.18973149535723176508e4932", "0"),
    ("1.1897314953572317650e4932", "1e4913"),
    ("1e4933", "0"),
    ("0x1.fffffffffffffffep16383", "0"),  # the largest long double, (2**64 - 1) * 2**16320
    ("0x1.fffffffffffffffe8p16383", "0"),  # a quarter of its ulp above: rounds down to it
    ("0x1.ffffffffffffffffp16383", "0"),  # half its ulp above, a tie: even is 2**16384, inf
    ("0x1.fffffffffffffffep16383", "0x1p16318"),  # a quarter of its ulp: stays
    ("0x1.fffffffffffffffep16383", "0x1p16319"),  # half its ulp: the sum overflows
    ("-0x1.fffffffffffffffep16383", "-0x1p16319"),
    ("0x1.8p-16445", "0"),  # 1.5 of the smallest subnormal: a tie, even is 2
    ("0x1.0000001p-16446", "0"),  # just above half the smallest: rounds up to it
    ("1e99999999999999999999", "0"),
    # strtold's syntax, and what string2ld refuses
    ("inf", "1"),
    ("-inf", "1"),
    (None, "inf"),
    (None, "-inf"),
    (None, "Infinity"),
    (None, "INF"),
    (None, "infinit"),
    ("1", "nan"),
    ("nan", "1"),
    (None, "0x1p3"),
    (None, "0X.8p1"),
    (None, "-0x1.8"),
    (None, "0xABCDEFp-20"),
    (None, "0x"),
    (None, "0x."),
    (None, "0x1p"),
    (None, "1e"),
    (None, "1e+0003"),
    (None, "1E-3"),
    (None, " 1"),
    (None, "1 "),
    (None, ""),
    (None, "."),
    (None, "+.5"),
    (None, "5."),
    (None, "+-1"),
    (None, "1_0"),
    (None, "00012"),
    ("x", "1"),
    ("1", "x"),
    ("1\x00", "1"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis")) as client:
        yield client


@pytest.fixture(scope="module")
def writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[moonish.ShardWriter]:
    options = moonish.ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    with moonish.ShardWriter(tmp_path_factory.mktemp("shard"), options, SYSTEM_CLOCK) as shard:
        yield shard


def _redis(server: redis.Redis, argv: list[bytes]) -> str | None:
    """Run ``argv``; its error text without ``ERR``, or None."""
    try:
        server.execute_command(*argv)
    except redis.ResponseError as exc:
        return str(exc)
    return None


def _moonish(writer: moonish.ShardWriter, argv: list[bytes]) -> tuple[str | None, object]:
    """Run ``argv``; (its error text without ``ERR``, or None; its reply)."""
    try:
        return None, writer.execute(0, argv).reply
    except CommandError as exc:
        return exc.message.removeprefix("ERR "), None


def _check(server: redis.Redis, writer: moonish.ShardWriter, base: bytes | None, by: bytes) -> None:
    """``SET k base; INCRBYFLOAT k by`` and ``HSET h f base; HINCRBYFLOAT h f by`` on both:
    the same error, or the same stored bytes (which are also moonish's reply)."""
    setup = [[b"DEL", b"k", b"h"]]
    if base is not None:
        setup += [[b"SET", b"k", base], [b"HSET", b"h", b"f", base]]
    for argv in setup:
        assert _redis(server, argv) is None
        writer.execute(0, argv)
    for argv, read in (
        ([b"INCRBYFLOAT", b"k", by], [b"GET", b"k"]),
        ([b"HINCRBYFLOAT", b"h", b"f", by], [b"HGET", b"h", b"f"]),
    ):
        theirs_error = _redis(server, argv)
        ours_error, reply = _moonish(writer, argv)
        theirs = server.execute_command(*read)
        entry = writer.keyspace.get(0, argv[1])
        ours = None if entry is None else (entry.value if read[0] == b"GET" else entry.value[b"f"])
        assert ours == theirs, (argv, base)
        assert ours_error == theirs_error, (argv, base)
        if ours_error is None:
            assert reply == ours, (argv, base)


@pytest.mark.parametrize(("base", "by"), CASES)
def test_tricky_cases_match_redis(
    server: redis.Redis, writer: moonish.ShardWriter, base: str | None, by: str
) -> None:
    _check(server, writer, None if base is None else base.encode(), by.encode())


@st.composite
def decimal_text(draw: st.DrawFn) -> bytes:
    """A number as a user might write it: a sign, up to 25 digits, perhaps a point, perhaps
    an exponent (mostly -30..400, sometimes near the long double's limits)."""
    sign = draw(st.sampled_from(["", "-", "+"]))
    digits = draw(st.text("0123456789", min_size=1, max_size=25))
    point = draw(st.none() | st.integers(0, len(digits)))
    mantissa = digits if point is None else f"{digits[:point]}.{digits[point:]}"
    exponent = draw(st.none() | st.integers(-30, 400) | st.integers(-4965, 4940))
    marker = draw(st.sampled_from(["e", "E"]))
    return f"{sign}{mantissa}{'' if exponent is None else f'{marker}{exponent}'}".encode()


@settings(max_examples=400, deadline=None)
@given(base=st.none() | decimal_text(), by=decimal_text())
def test_random_decimals_match_redis(
    server: redis.Redis, writer: moonish.ShardWriter, base: bytes | None, by: bytes
) -> None:
    _check(server, writer, base, by)


def test_sums_in_a_row_match_redis(server: redis.Redis, writer: moonish.ShardWriter) -> None:
    """Rounding errors accumulate as in Redis: 0.1 added 1000 times, then 1/3 approximations."""
    _check(server, writer, None, b"0.1")
    for by in [b"0.1"] * 1000 + [b"0.333333333333333333333"] * 50 + [b"-1e-18"] * 20:
        assert _redis(server, [b"INCRBYFLOAT", b"k", by]) is None
        assert writer.execute(0, [b"INCRBYFLOAT", b"k", by]).reply == server.get(b"k"), by
