"""Argument parsing with Redis's rules and error texts (``string2ll``, ``strtold``)."""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from moonish.errors import CommandError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_INT: Final = re.compile(rb"-?(?:0|[1-9][0-9]*)\Z")
NOT_INTEGER: Final = "ERR value is not an integer or out of range"
NOT_FLOAT: Final = "ERR value is not a valid float"
SYNTAX: Final = "ERR syntax error"
INFINITE: Final = "ERR increment would produce NaN or Infinity"


def integer(value: bytes, message: str = NOT_INTEGER) -> int:
    """A signed 64-bit integer written as Redis requires (no sign ``+``, no leading zeros,
    no spaces).

    Raises:
        CommandError: ``message``.
    """
    size = len(value)  # the common case first: up to 18 digits, no leading zero, no sign
    if 0 < size < 19 and value.isdigit() and (size == 1 or value[0] != 48):  # (48: "0")
        return int(value)
    if _INT.match(value) is None:
        raise CommandError(message)
    number = int(value)
    if not INT64_MIN <= number <= INT64_MAX:
        raise CommandError(message)
    return number


def score(value: bytes, message: str = NOT_FLOAT) -> float:
    """A double as Redis's ``string2d`` reads it (src/util.c: ``strtod`` over the whole
    argument, no leading space, no NaN, no overflow, no non-zero number rounded to zero).

    Raises:
        CommandError: ``message``.
    """
    if value.isdigit() and len(value) < 16:  # the common case: exact, and what strtod reads
        return float(int(value))
    if not value or value[:1].isspace():
        raise CommandError(message)
    number, used, erange = strtod(value)
    if used != len(value) or math.isnan(number) or (erange and number in (0.0, _INF, -_INF)):
        raise CommandError(message)
    return number


_INF: Final = math.inf
# glibc strtod's grammar ("C" locale): leading white space, a sign, then a hexadecimal or
# decimal number with an optional exponent, inf/infinity, or nan with an optional (chars).
_STRTOD: Final = re.compile(
    rb"[ \t\n\v\f\r]*(?P<num>[+-]?(?:"
    rb"0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?"
    rb"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    rb"|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?"
    rb"|[nN][aA][nN](?:\([0-9A-Za-z_]*\))?))"
)


def strtod(value: bytes) -> tuple[float, int, bool]:
    """C's ``strtod`` (glibc, correctly rounded) on ``value``: (the number, how many bytes it
    read, whether it set ``ERANGE``: an overflow to infinity or an underflow). Nothing read
    gives ``(0.0, 0, False)``."""
    match = _STRTOD.match(value)
    if match is None:
        return 0.0, 0, False
    text = match["num"].lower()
    body = text.lstrip(b"+-")
    negative = text.startswith(b"-")
    if body.startswith(b"inf"):
        return (-_INF if negative else _INF), match.end(), False
    if body.startswith(b"nan"):
        return math.nan, match.end(), False
    try:
        number = float.fromhex(text.decode()) if b"x" in body else float(text)
    except OverflowError:
        return (-_INF if negative else _INF), match.end(), True
    mantissa = body.partition(b"p" if b"x" in body else b"e")[0]
    nonzero = mantissa.strip(b"0x.") != b""
    erange = math.isinf(number) or (nonzero and abs(number) < sys.float_info.min)
    return number, match.end(), erange


@dataclass(frozen=True, slots=True)
class LongDouble:
    """A value of x86-64's ``long double`` (80-bit extended precision: a 64-bit significand,
    exponents down to the subnormal 2**-16445, largest finite (2**64 - 1) * 2**16320), the
    type Redis's INCRBYFLOAT and HINCRBYFLOAT compute in.

    ``exact`` is its exact value, or None for an infinity (its sign never matters: every sum
    with one is refused).
    """

    exact: Fraction | None


_LD_SIGNIFICAND_BITS: Final = 64
_LD_MIN_QUANTUM: Final = -16445  # exponent of the smallest subnormal's unit, 2**-16445
_LD_MAX_QUANTUM: Final = 16320  # exponent of the largest finite value's unit
_LD_INFINITY: Final = LongDouble(None)
_MAX_LONG_DOUBLE_CHARS: Final = 5 * 1024  # src/util.h: string2ld refuses this long or longer
# strtold's grammar (glibc, "C" locale), less what string2ld refuses (leading space, NaN):
# a sign, then a decimal or hexadecimal number with an optional exponent, or inf/infinity.
_STRTOLD: Final = re.compile(
    rb"(?P<sign>[+-]?)(?:"
    rb"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[+-]?[0-9]+))?"
    rb"|0[xX](?P<hint>[0-9a-fA-F]*)(?:\.(?P<hfrac>[0-9a-fA-F]*))?(?:[pP](?P<hexp>[+-]?[0-9]+))?"
    rb"|(?P<inf>[iI][nN][fF](?:[iI][nN][iI][tT][yY])?))"
)
_EXPONENT_CLAMP: Final = 10**9  # exponents beyond this are all over- or underflows
_CHUNK_DIGITS: Final = 1000  # str <-> int in pieces: Python refuses more than 4300 digits at once
_CHUNK: Final = 10**_CHUNK_DIGITS


def _exponent(text: bytes | None) -> int:
    """An exponent's digits (any number of them), clamped to +-``_EXPONENT_CLAMP``."""
    if text is None:
        return 0
    digits = text.lstrip(b"+-").lstrip(b"0")
    number = min(int(digits or b"0"), _EXPONENT_CLAMP) if len(digits) <= 10 else _EXPONENT_CLAMP
    return -number if text.startswith(b"-") else number


def _digits_to_int(digits: bytes) -> int:
    number = 0
    for start in range(0, len(digits), _CHUNK_DIGITS):
        chunk = digits[start : start + _CHUNK_DIGITS]
        number = number * 10 ** len(chunk) + int(chunk)
    return number


def _int_to_digits(number: int) -> str:
    parts = []
    while number >= _CHUNK:
        number, low = divmod(number, _CHUNK)
        parts.append(f"{low:0{_CHUNK_DIGITS}d}")
    parts.append(str(number))
    return "".join(reversed(parts))


def _round_half_even(numerator: int, denominator: int) -> int:
    quotient, remainder = divmod(numerator, denominator)
    if 2 * remainder > denominator or (2 * remainder == denominator and quotient & 1):
        quotient += 1
    return quotient


def _nearest(value: Fraction) -> LongDouble:
    """The long double nearest ``value`` (ties to the even significand, as the x87 unit and
    glibc's ``strtold`` round); past the largest finite value, an infinity; below half the
    smallest subnormal, zero (the caller decides whether that is an underflow)."""
    if value == 0:
        return LongDouble(Fraction(0))
    numerator, denominator = abs(value.numerator), value.denominator
    exponent = numerator.bit_length() - denominator.bit_length()  # within one of log2
    if numerator << max(-exponent, 0) < denominator << max(exponent, 0):
        exponent -= 1
    # now 2**exponent <= |value| < 2**(exponent + 1)
    quantum = max(exponent - (_LD_SIGNIFICAND_BITS - 1), _LD_MIN_QUANTUM)
    if quantum > _LD_MAX_QUANTUM:
        return _LD_INFINITY
    if quantum >= 0:
        significand = _round_half_even(numerator, denominator << quantum)
    else:
        significand = _round_half_even(numerator << -quantum, denominator)
    if quantum == _LD_MAX_QUANTUM and significand >> _LD_SIGNIFICAND_BITS:
        return _LD_INFINITY  # rounded up past (2**64 - 1) * 2**16320
    exact = Fraction(significand) * Fraction(2) ** quantum
    return LongDouble(-exact if value < 0 else exact)


def _strtold(value: bytes) -> LongDouble | None:
    """``value`` as Redis's ``string2ld`` reads it (src/util.c), None where it refuses.

    glibc's ``strtold`` rounds correctly to nearest; string2ld then refuses an overflow
    (``ERANGE`` with ``HUGE_VAL``), an underflow to zero of a non-zero number (``ERANGE``
    with zero), NaN, leading whitespace, trailing bytes, and strings of 5120 bytes or more.
    A subnormal result is kept. ``inf`` and ``infinity`` (any case, signed) are accepted.
    """
    if not value or len(value) >= _MAX_LONG_DOUBLE_CHARS:
        return None
    match = _STRTOLD.fullmatch(value)
    if match is None:
        return None
    if match["inf"] is not None:
        return _LD_INFINITY
    if match["hint"] is not None:  # hexadecimal digits times 2**exponent
        whole, fraction, radix = match["hint"], match["hfrac"] or b"", 2
        digits = int(whole + fraction or b"0", 16)
        exponent = _exponent(match["hexp"]) - 4 * len(fraction)
        magnitude = exponent + digits.bit_length()  # 2**(magnitude - 1) <= |number|
        in_range = -16460 <= magnitude <= 16385  # the long double range, with margins
    else:  # decimal digits times 10**exponent
        whole, fraction, radix = match["int"], match["frac"] or b"", 10
        significant = (whole + fraction).lstrip(b"0")
        digits = _digits_to_int(significant) if significant else 0
        exponent = _exponent(match["exp"]) - len(fraction)
        magnitude = exponent + len(significant)  # 10**(magnitude - 1) <= |number|
        in_range = -4955 <= magnitude <= 4935  # about 3.6e-4951 to 1.19e4932, with margins
    if not whole and not fraction:
        return None  # ".", "+", "0x", "0x.": strtold stops before the end
    if digits == 0:
        return LongDouble(Fraction(0))
    if not in_range:
        return None  # an overflow, or a non-zero number that underflows to zero
    number = _nearest(digits * Fraction(radix) ** exponent).exact
    if number is None or number == 0:
        return None  # an overflow, or a non-zero number that underflows to zero
    return LongDouble(-number if match["sign"] == b"-" else number)


def decimal(value: bytes, message: str = NOT_FLOAT) -> LongDouble:
    """A ``long double`` as Redis's ``string2ld`` reads it for INCRBYFLOAT and HINCRBYFLOAT
    (src/util.c, Redis 7.0): ``strtold``'s syntax (decimal or ``0x`` hexadecimal, optional
    exponent, ``inf``), rounded to the nearest long double.

    Raises:
        CommandError: ``message``: not a number, NaN, leading or trailing bytes, 5120 bytes
            or longer, past the largest long double (overflow) or a non-zero number that
            rounds to zero (underflow).
    """
    number = _strtold(value)
    if number is None:
        raise CommandError(message)
    return number


def add_decimal(base: LongDouble, increment: LongDouble) -> bytes:
    """``base + increment`` as Redis's INCRBYFLOAT writes it: added in ``long double`` (the
    exact sum rounded to the nearest long double, ties to even), then ``ld2string(...,
    LD_STR_HUMAN)`` (src/util.c): ``snprintf("%.17Lf")`` (glibc: the exact binary value
    rounded half to even at 17 decimals), trailing zeros and ``.`` removed, ``-0`` as ``0``.

    Raises:
        CommandError: an operand is infinite, or the sum overflows.
    """
    if base.exact is None or increment.exact is None:
        raise CommandError(INFINITE)
    total = _nearest(base.exact + increment.exact).exact
    if total is None:
        raise CommandError(INFINITE)
    scaled = _round_half_even(abs(total.numerator) * 10**17, total.denominator)
    digits = _int_to_digits(scaled).rjust(18, "0")
    text = f"{'-' if total < 0 else ''}{digits[:-17]}.{digits[-17:]}".rstrip("0").rstrip(".")
    return b"0" if text == "-0" else text.encode()


def add_int(current: int, increment: int) -> int:
    """``current + increment`` in int64.

    Raises:
        CommandError: the sum overflows.
    """
    total = current + increment
    if not INT64_MIN <= total <= INT64_MAX:
        raise CommandError("ERR increment or decrement would overflow")
    return total


def arity(argv: list[bytes], expected: int) -> None:
    """Redis arity: ``expected`` > 0 exact, < 0 at least ``-expected`` (command included).

    Raises:
        CommandError: wrong number of arguments.
    """
    count = len(argv)
    if (expected > 0 and count != expected) or (expected < 0 and count < -expected):
        name = argv[0].decode(errors="replace").lower()
        raise CommandError(f"ERR wrong number of arguments for '{name}' command")


def count_arg(value: bytes) -> int:
    """A pop count: a non-negative integer.

    Raises:
        CommandError: negative or not an integer.
    """
    number = integer(value, "ERR value is out of range, must be positive")
    if number < 0:
        raise CommandError("ERR value is out of range, must be positive")
    return number
