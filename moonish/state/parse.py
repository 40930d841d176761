"""Argument parsing with Redis's rules and error texts (``string2ll``, ``strtold``)."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation, localcontext

from moonish.errors import CommandError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_INT = re.compile(rb"-?(?:0|[1-9][0-9]*)\Z")
_FLOAT_BAD = re.compile(rb"[\s_]|\A\Z")
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
SYNTAX = "ERR syntax error"


def integer(value: bytes, message: str = NOT_INTEGER) -> int:
    """A signed 64-bit integer written as Redis requires (no sign ``+``, no leading zeros,
    no spaces).

    Raises:
        CommandError: ``message``.
    """
    if _INT.match(value) is None:
        raise CommandError(message)
    number = int(value)
    if not INT64_MIN <= number <= INT64_MAX:
        raise CommandError(message)
    return number


def score(value: bytes, message: str = NOT_FLOAT) -> float:
    """A double as ``strtod`` reads it (``inf``, ``-inf``, exponents); NaN is refused.

    Raises:
        CommandError: ``message``.
    """
    if _FLOAT_BAD.search(value) is not None:
        raise CommandError(message)
    try:
        number = float(value)
    except ValueError:
        raise CommandError(message) from None
    if math.isnan(number):
        raise CommandError(message)
    return number


def decimal(value: bytes, message: str = NOT_FLOAT) -> Decimal:
    """A decimal for INCRBYFLOAT-style arithmetic (Redis computes in ``long double``).

    Raises:
        CommandError: ``message``.
    """
    if _FLOAT_BAD.search(value) is not None:
        raise CommandError(message)
    try:
        number = Decimal(value.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        raise CommandError(message) from None
    if number.is_nan() or abs(number.adjusted()) > 4900:
        raise CommandError(message)
    return number


def add_decimal(base: Decimal, increment: Decimal) -> bytes:
    """``base + increment`` as Redis's INCRBYFLOAT writes it (``ld2string(...,
    LD_STR_HUMAN)``: 17 decimals, trailing zeros removed). Redis adds in ``long double``
    (about 19 significant digits); the sum here is exact, so results agree wherever the
    operands have fewer significant digits than that.

    Raises:
        CommandError: the sum is infinite.
    """
    if not (base.is_finite() and increment.is_finite()):
        raise CommandError("ERR increment would produce NaN or Infinity")
    with localcontext() as context:
        context.prec = 6000
        context.Emax = 5000
        text = f"{(base + increment).quantize(Decimal(1).scaleb(-17)):f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return b"0" if text in ("-0", "") else text.encode()


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
