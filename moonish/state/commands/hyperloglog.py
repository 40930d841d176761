"""HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, byte for byte as Redis 7.0 keeps them
(src/hyperloglog.c): a HyperLogLog is a string, and moonish changes its bytes exactly as Redis
does, so its images and Redis's ``GET`` agree.

Layout (``struct hllhdr``, 16 bytes, then the registers)::

    0   4  magic "HYLL"
    4   1  encoding: 0 dense, 1 sparse
    5   3  unused, zero
    8   8  cached cardinality, little endian; bit 7 of byte 15 set: not valid
    16  .. dense: 16384 registers of 6 bits, least significant bits first (12288 bytes);
           sparse: opcodes ZERO ``00xxxxxx`` (1..64 zero registers), XZERO ``01xxxxxx
           yyyyyyyy`` (1..16384 zero registers), VAL ``1vvvvvxx`` (1..4 registers of value
           1..32)

An element's register and value come from MurmurHash64A (seed ``0xadc83b19``): the low 14 bits
choose the register, the run of zero bits above them plus one is the value. A sparse
HyperLogLog becomes dense when a value exceeds 32 or it would grow past 3000 bytes
(``hll-sparse-max-bytes``'s default). PFCOUNT of one key stores the cardinality it computes
in the header (a write Redis propagates); of several keys it writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.keyspace import Access
from moonish.values.model import STRING, Entry

HDR = 16  # header bytes
P = 14  # register index bits
Q = 64 - P
REGISTERS = 1 << P
DENSE_BYTES = HDR + REGISTERS * 6 // 8
SPARSE_MAX_BYTES = 3000  # hll-sparse-max-bytes
ALPHA_INF = 0.721347520444481703680  # 0.5 / ln(2)
_MASK64 = (1 << 64) - 1
_M = 0xC6A4A7935BD1E995
_NOT_HLL = "WRONGTYPE Key is not a valid HyperLogLog string value."
_CORRUPT = "INVALIDOBJ Corrupted HLL object detected"


def murmur64a(data: bytes, seed: int = 0xADC83B19) -> int:
    """MurmurHash64A as Redis computes it (endian neutral: words read little endian)."""
    size = len(data)
    h = (seed ^ (size * _M)) & _MASK64
    whole = size - (size & 7)
    for i in range(0, whole, 8):
        k = (int.from_bytes(data[i : i + 8], "little") * _M) & _MASK64
        k ^= k >> 47
        k = (k * _M) & _MASK64
        h = ((h ^ k) * _M) & _MASK64
    if size & 7:
        h ^= int.from_bytes(data[whole:], "little")
        h = (h * _M) & _MASK64
    h ^= h >> 47
    h = (h * _M) & _MASK64
    return h ^ (h >> 47)


def pattern(element: bytes) -> tuple[int, int]:
    """``hllPatLen``: (register index, length of the ``000..1`` run)."""
    hashed = murmur64a(element)
    index = hashed & (REGISTERS - 1)
    rest = (hashed >> P) | (1 << Q)
    return index, (rest & -rest).bit_length()


def _new() -> bytearray:
    """``createHLLObject``: an empty sparse HyperLogLog (one XZERO of 16384 registers)."""
    return bytearray(b"HYLL\x01\0\0\0" + bytes(8) + bytes(((REGISTERS - 1) >> 8 | 0x40, 0xFF)))


def _get(hll: bytearray, index: int) -> int:
    byte, shift = HDR + index * 6 // 8, index * 6 & 7
    high = hll[byte + 1] if byte + 1 < len(hll) else 0
    return ((hll[byte] >> shift) | (high << (8 - shift))) & 63


def _set(hll: bytearray, index: int, value: int) -> None:
    byte, shift = HDR + index * 6 // 8, index * 6 & 7
    hll[byte] = (hll[byte] & ~(63 << shift) | (value << shift)) & 0xFF
    if byte + 1 < len(hll):
        hll[byte + 1] = (hll[byte + 1] & ~(63 >> (8 - shift)) | (value >> (8 - shift))) & 0xFF


def _dense_set(hll: bytearray, index: int, count: int) -> int:
    if count > _get(hll, index):
        _set(hll, index, count)
        return 1
    return 0


def _runs(hll: bytearray | bytes) -> list[tuple[int, int]] | None:
    """The sparse opcodes as (registers, value) runs; None when they do not cover exactly
    16384 registers (a VAL run past the end stops the walk, as Redis's loops do)."""
    runs, p, end, covered = [], HDR, len(hll), 0
    while p < end:
        op = hll[p]
        if op & 0xC0 == 0:
            runs.append(((op & 0x3F) + 1, 0))
            p += 1
        elif op & 0x80:
            length = (op & 3) + 1
            if covered + length > REGISTERS:
                return None
            runs.append((length, ((op >> 2) & 0x1F) + 1))
            p += 1
        else:
            low = hll[p + 1] if p + 1 < end else 0
            runs.append(((((op & 0x3F) << 8) | low) + 1, 0))
            p += 2
        covered += runs[-1][0]
    return runs if covered == REGISTERS else None


def _to_dense(hll: bytearray) -> bytearray | None:
    """``hllSparseToDense`` (the header, cached cardinality included, is kept)."""
    if hll[4] == 0:
        return hll
    runs = _runs(hll)
    if runs is None:
        return None
    dense = bytearray(DENSE_BYTES)
    dense[:HDR] = hll[:HDR]
    dense[4] = 0
    index = 0
    for length, value in runs:
        if value:
            for i in range(index, index + length):
                _set(dense, i, value)
        index += length
    return dense


def _val(value: int, length: int) -> int:
    return 0x80 | (value - 1) << 2 | (length - 1)


def _zeros(length: int) -> bytes:
    return (
        bytes(((length - 1) >> 8 | 0x40, (length - 1) & 0xFF))
        if length > 64
        else bytes((length - 1,))
    )


def _sparse_set(hll: bytearray, index: int, count: int) -> tuple[bytearray, int]:
    """``hllSparseSet``: (the HyperLogLog, perhaps promoted to dense; 1 updated, 0 not, -1
    corrupt)."""
    if count > 32:
        return _promote(hll, index, count)
    p, end, first, prev, span, found = HDR, len(hll), 0, None, 0, False
    while p < end:
        op, oplen = hll[p], 1
        if op & 0xC0 == 0:
            span = (op & 0x3F) + 1
        elif op & 0x80:
            span = (op & 3) + 1
        else:
            span = (((op & 0x3F) << 8) | (hll[p + 1] if p + 1 < end else 0)) + 1
            oplen = 2
        if index <= first + span - 1:
            found = True
            break
        prev, p, first = p, p + oplen, first + span
    if not found or span == 0:
        return hll, -1
    op = hll[p]
    kind = "zero" if op & 0xC0 == 0 else "val" if op & 0x80 else "xzero"
    if kind == "val":
        current = ((op >> 2) & 0x1F) + 1
        if current >= count:
            return hll, 0
    if span == 1 and kind != "xzero":
        hll[p] = _val(count, 1)
    else:
        last, seq = first + span - 1, bytearray()
        if kind == "val":
            if index != first:
                seq.append(_val(current, index - first))
            seq.append(_val(count, 1))
            if index != last:
                seq.append(_val(current, last - index))
        else:
            if index != first:
                seq += _zeros(index - first)
            seq.append(_val(count, 1))
            if index != last:
                seq += _zeros(last - index)
        old = 2 if kind == "xzero" else 1
        if len(seq) > old and len(hll) + len(seq) - old > SPARSE_MAX_BYTES:
            return _promote(hll, index, count)
        hll[p : p + old] = seq
    p, end, scans = HDR if prev is None else prev, len(hll), 5  # merge adjacent VALs
    while p < end and scans:
        scans -= 1
        op = hll[p]
        if op & 0xC0 == 0x40:
            p += 2
            continue
        if op & 0xC0 == 0:
            p += 1
            continue
        if p + 1 < end and hll[p + 1] & 0x80:
            value, other = ((op >> 2) & 0x1F) + 1, ((hll[p + 1] >> 2) & 0x1F) + 1
            length = (op & 3) + (hll[p + 1] & 3) + 2
            if value == other and length <= 4:
                hll[p + 1] = _val(value, length)
                del hll[p]
                end -= 1
                continue
        p += 1
    hll[15] |= 0x80
    return hll, 1


def _promote(hll: bytearray, index: int, count: int) -> tuple[bytearray, int]:
    dense = _to_dense(hll)
    if dense is None:
        return hll, -1
    _dense_set(dense, index, count)
    return dense, 1


def _registers(hll: bytearray | bytes) -> list[int] | None:
    """Every register's value (None: a corrupt sparse HyperLogLog)."""
    if hll[4] == 0:
        out: list[int] = []
        for k in range(HDR, DENSE_BYTES, 3):
            word = hll[k] | hll[k + 1] << 8 | hll[k + 2] << 16
            out += (word & 63, word >> 6 & 63, word >> 12 & 63, word >> 18)
        return out
    runs = _runs(hll)
    return None if runs is None else [v for length, v in runs for _ in range(length)]


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        previous = z
        z += x * y
        y += y
        if previous == z:
            return z


def _tau(x: float) -> float:
    if x in (0.0, 1.0):
        return 0.0
    y, z = 1.0, 1 - x
    while True:
        x = math.sqrt(x)
        previous = z
        y *= 0.5
        z -= math.pow(1 - x, 2) * y
        if previous == z:
            return z / 3


def count(registers: list[int]) -> int:
    """``hllCount``: Ertl's estimator over the register histogram, as Redis computes it in
    doubles, rounded half away from zero (``llroundl``)."""
    histogram = [0] * 64
    for value in registers:
        histogram[value] += 1
    m = float(REGISTERS)
    z = m * _tau((m - histogram[Q + 1]) / m)
    for j in range(Q, 0, -1):
        z += histogram[j]
        z *= 0.5
    z += m * _sigma(histogram[0] / m)
    estimate = ALPHA_INF * m * m / z
    rounded = math.floor(estimate)
    return int(rounded + 1 if estimate - rounded >= 0.5 else rounded)


def _hll(acc: Access, db: int, key: bytes) -> Entry | None:
    """The key's HyperLogLog (``isHLLObjectOrReply``), None when missing.

    Raises:
        CommandError: WRONGTYPE, or a string that is not a HyperLogLog.
    """
    entry = acc.get(db, key, STRING)
    if entry is None:
        return None
    value = entry.value
    if (
        len(value) < HDR
        or value[:4] != b"HYLL"
        or value[4] > 1
        or (value[4] == 0 and len(value) != DENSE_BYTES)
    ):
        raise CommandError(_NOT_HLL)
    return entry


def _store(acc: Access, db: int, key: bytes, entry: Entry | None, hll: bytearray) -> None:
    if entry is None:
        acc.put(db, key, Entry(STRING, bytes(hll)))
    else:
        entry.value = bytes(hll)
        acc.changed(db, key, entry)


def cmd_pfadd(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -2)
    entry = _hll(acc, db, argv[1])
    hll = _new() if entry is None else bytearray(entry.value)
    updated = entry is None
    for element in argv[2:]:
        index, run = pattern(element)
        if hll[4] == 0:
            result = _dense_set(hll, index, run)
        else:
            hll, result = _sparse_set(hll, index, run)
        if result < 0:
            raise CommandError(_CORRUPT)
        updated = updated or result == 1
    if not updated:
        return 0
    hll[15] |= 0x80
    _store(acc, db, argv[1], entry, hll)
    return 1


def cmd_pfcount(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -2)
    if len(argv) > 2:
        merged = [0] * REGISTERS
        for key in argv[1:]:
            entry = _hll(acc, db, key)
            if entry is not None:
                merged = _merge(merged, entry.value)
        return count(merged)
    entry = _hll(acc, db, argv[1])
    if entry is None:
        return 0
    if not entry.value[15] & 0x80:
        return int.from_bytes(entry.value[8:16], "little")
    registers = _registers(entry.value)
    if registers is None:
        raise CommandError(_CORRUPT)
    cardinality = count(registers)
    entry.value = entry.value[:8] + cardinality.to_bytes(8, "little") + entry.value[16:]
    acc.changed(db, argv[1], entry)
    return cardinality


def _merge(merged: list[int], value: bytes) -> list[int]:
    registers = _registers(value)
    if registers is None:
        raise CommandError(_CORRUPT)
    return list(map(max, merged, registers))


def cmd_pfmerge(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -2)
    merged, dense = [0] * REGISTERS, False
    for key in argv[1:]:
        entry = _hll(acc, db, key)
        if entry is not None:
            dense = dense or entry.value[4] == 0
            merged = _merge(merged, entry.value)
    target = acc.get(db, argv[1])
    hll = _new() if target is None else bytearray(target.value)
    if dense:
        converted = _to_dense(hll)
        if converted is None:
            raise CommandError(_CORRUPT)
        hll = converted
    for index, value in enumerate(merged):
        if value:
            if hll[4] == 0:
                _dense_set(hll, index, value)
            else:
                hll, _ = _sparse_set(hll, index, value)
    hll[15] |= 0x80
    _store(acc, db, argv[1], target, hll)
    return b"OK"


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"PFADD": (cmd_pfadd, [1]),
    b"PFCOUNT": (cmd_pfcount, "all"),
    b"PFMERGE": (cmd_pfmerge, "all"),
}
"""Name -> (handler, key positions)."""
