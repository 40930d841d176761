"""Bitmap and string-range commands: SETRANGE, SETBIT, BITOP, BITFIELD (semantics of Redis
7.0: src/t_string.c ``setrangeCommand``, src/bitops.c ``setbitCommand``, ``bitopCommand``,
``bitfieldGeneric``).

Bits are numbered from the most significant bit of the first byte; a write past the end of
the string pads it with zero bytes (``sdsgrowzero``), and a missing key is an empty string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.keyspace import Access
from moonish.values.model import STRING, Entry

MAX_BULK_BYTES = 512 * 1024 * 1024  # proto-max-bulk-len's default: the largest string
_BIT_OFFSET = "ERR bit offset is not an integer or out of range"
_BITFIELD_TYPE = (
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported "
    "but i64 is."
)
WRAP, SAT, FAIL = b"WRAP", b"SAT", b"FAIL"


def _bit_offset(value: bytes, bits: int = 0) -> int:
    """``getBitOffsetFromArgument``: a bit offset, ``#n`` meaning ``n * bits`` when ``bits``."""
    hashed = bits > 0 and value.startswith(b"#")
    offset = parse.integer(value[1:] if hashed else value, _BIT_OFFSET)
    if hashed:
        offset *= bits
    if offset < 0 or offset >> 3 >= MAX_BULK_BYTES:
        raise CommandError(_BIT_OFFSET)
    return offset


def _grown(acc: Access, db: int, key: bytes, max_bit: int) -> tuple[Entry, bool, bytes]:
    """``lookupStringForBitCommand``: the string at ``key`` padded with zero bytes so that
    bit ``max_bit`` exists (created when missing); whether it was created or grew, and its
    value before.

    Raises:
        CommandError: WRONGTYPE.
    """
    size = (max_bit >> 3) + 1
    entry = acc.get(db, key, STRING)
    if entry is None:
        entry = Entry(STRING, bytes(size))
        acc.put(db, key, entry)
        return entry, True, b""
    old = entry.value
    if len(old) < size:
        entry.value = old + bytes(size - len(old))
        return entry, True, old
    return entry, False, old


def cmd_setrange(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    offset, value = parse.integer(argv[2]), argv[3]
    if offset < 0:
        raise CommandError("ERR offset is out of range")
    entry = acc.get(db, argv[1], STRING)
    if not value:
        return 0 if entry is None else len(entry.value)
    if offset + len(value) > MAX_BULK_BYTES:
        raise CommandError("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    old = b"" if entry is None else entry.value
    padded = old + bytes(max(offset - len(old), 0))
    new = padded[:offset] + value + padded[offset + len(value) :]
    if entry is None:
        acc.put(db, argv[1], Entry(STRING, new))
    else:
        entry.value = new
        acc.changed(db, argv[1], entry)
    return len(new)


def cmd_setbit(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    offset = _bit_offset(argv[2])
    on = parse.integer(argv[3], "ERR bit is not an integer or out of range")
    if on & ~1:
        raise CommandError("ERR bit is not an integer or out of range")
    entry, grew, _ = _grown(acc, db, argv[1], offset)
    value = entry.value
    byte, mask = offset >> 3, 1 << (7 - (offset & 7))
    was = 1 if value[byte] & mask else 0
    if grew or was != on:
        updated = value[byte] & ~mask | (mask if on else 0)
        entry.value = value[:byte] + bytes((updated,)) + value[byte + 1 :]
        acc.changed(db, argv[1], entry)
    return was


_BITOPS = {b"AND": "and", b"OR": "or", b"XOR": "xor", b"NOT": "not"}


def cmd_bitop(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -4)
    op = _BITOPS.get(argv[1].upper())
    if op is None:
        raise CommandError(parse.SYNTAX)
    if op == "not" and len(argv) != 4:
        raise CommandError("ERR BITOP NOT must be called with a single source key.")
    sources = []
    for key in argv[3:]:
        entry = acc.get(db, key, STRING)
        sources.append(b"" if entry is None else entry.value)
    size = max(map(len, sources))
    destination = argv[2]
    if not size:
        if acc.get(db, destination) is not None:
            acc.remove(db, destination)
        return 0
    numbers = [int.from_bytes(s.ljust(size, b"\0"), "big") for s in sources]
    result = numbers[0]
    if op == "not":
        result ^= (1 << (8 * size)) - 1
    for number in numbers[1:]:
        if op == "and":
            result &= number
        elif op == "or":
            result |= number
        else:
            result ^= number
    _store_string(acc, db, destination, result.to_bytes(size, "big"))
    return size


def _store_string(acc: Access, db: int, key: bytes, value: bytes) -> None:
    """``setKey``: replace whatever ``key`` holds (any type) by a string without expiry."""
    acc.get(db, key)
    acc.put(db, key, Entry(STRING, value))


# -- BITFIELD ------------------------------------------------------------------------------


def _bitfield_type(value: bytes) -> tuple[bool, int]:
    """``getBitfieldTypeFromArgument``: (signed, bits), ``i1``..``i64`` or ``u1``..``u63``."""
    sign = value[:1]
    if sign not in (b"i", b"u"):
        raise CommandError(_BITFIELD_TYPE)
    bits = parse.integer(value[1:], _BITFIELD_TYPE)
    if not 1 <= bits <= (64 if sign == b"i" else 63):
        raise CommandError(_BITFIELD_TYPE)
    return sign == b"i", bits


def _get_field(value: bytes | bytearray, offset: int, bits: int, signed: bool) -> int:
    """The ``bits``-bit integer at bit ``offset`` (big endian; past the end reads zeros)."""
    first, last = offset >> 3, (offset + bits - 1) >> 3
    chunk = value[first : last + 1].ljust(last + 1 - first, b"\0")
    shift = (last + 1) * 8 - (offset + bits)
    number = (int.from_bytes(chunk, "big") >> shift) & ((1 << bits) - 1)
    if signed and number >> (bits - 1):
        number -= 1 << bits
    return number


def _set_field(value: bytearray, offset: int, bits: int, number: int) -> None:
    """Write the low ``bits`` bits of ``number`` at bit ``offset`` (``value`` is long enough)."""
    first, last = offset >> 3, (offset + bits - 1) >> 3
    shift = (last + 1) * 8 - (offset + bits)
    mask = ((1 << bits) - 1) << shift
    current = int.from_bytes(value[first : last + 1], "big")
    current = current & ~mask | ((number << shift) & mask)
    value[first : last + 1] = current.to_bytes(last + 1 - first, "big")


def _overflow(total: int, bits: int, signed: bool, mode: bytes) -> int | None:
    """``check[Un]signedBitfieldOverflow``: ``total`` (an exact sum, or a value to set) as
    the field stores it: wrapped modulo ``2**bits``, saturated, or None (FAIL) when it does
    not fit."""
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if low <= total <= high:
        return total
    if mode == FAIL:
        return None
    if mode == SAT:
        return high if total > high else low
    wrapped = total & ((1 << bits) - 1)
    return wrapped - (1 << bits) if signed and wrapped >> (bits - 1) else wrapped


def cmd_bitfield(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -2)
    ops: list[tuple[bytes, bool, int, int, int, bytes]] = []  # op, signed, bits, offset, n, mode
    mode, i, highest = WRAP, 2, -1
    while i < len(argv):
        name, left = argv[i].upper(), len(argv) - i - 1
        if name == b"OVERFLOW" and left >= 1:
            mode = argv[i + 1].upper()
            if mode not in (WRAP, SAT, FAIL):
                raise CommandError("ERR Invalid OVERFLOW type specified")
            i += 2
            continue
        if not ((name == b"GET" and left >= 2) or (name in (b"SET", b"INCRBY") and left >= 3)):
            raise CommandError(parse.SYNTAX)
        signed, bits = _bitfield_type(argv[i + 1])
        offset = _bit_offset(argv[i + 2], bits)
        number = 0
        if name != b"GET":
            highest = max(highest, offset + bits - 1)
            number = parse.integer(argv[i + 3])
        ops.append((name, signed, bits, offset, number, mode))
        i += 3 if name == b"GET" else 4
    if highest < 0:  # only GETs: a read
        entry = acc.get(db, argv[1], STRING)
        value = b"" if entry is None else entry.value
        return [_get_field(value, offset, bits, signed) for _, signed, bits, offset, _, _ in ops]
    entry, grew, before = _grown(acc, db, argv[1], highest)
    value = bytearray(entry.value)
    replies: list[int | None] = []
    for name, signed, bits, offset, number, op_mode in ops:
        old = _get_field(value, offset, bits, signed)
        if name == b"GET":
            replies.append(old)
            continue
        if not signed and name == b"SET":
            number &= (1 << 64) - 1  # the value is taken as a uint64_t
        new = _overflow(old + number if name == b"INCRBY" else number, bits, signed, op_mode)
        if new is None:
            replies.append(None)
            continue
        replies.append(new if name == b"INCRBY" else old)
        _set_field(value, offset, bits, new)
    if grew or bytes(value) != before:
        entry.value = bytes(value)
        acc.changed(db, argv[1], entry)
    return replies


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"SETRANGE": (cmd_setrange, [1]),
    b"SETBIT": (cmd_setbit, [1]),
    b"BITOP": (cmd_bitop, lambda argv: range(2, len(argv))),
    b"BITFIELD": (cmd_bitfield, [1]),
}
"""Name -> (handler, key positions: argv indexes, or a function of argv giving them)."""
