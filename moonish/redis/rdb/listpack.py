"""Decoders of Redis's compact encodings: listpack, ziplist, intset and zipmap.

These are the blobs an RDB file stores for small lists, sets, sorted sets and hashes
(docs/rdb-format.md). Each decoder takes the whole blob (bytes) and returns its elements in
order, as bytes: an integer-encoded element becomes its decimal text, which is what Redis
replies for it (``LRANGE``, ``HGETALL``, ...).

Sources: Redis ``listpack.c`` (listpack), ``ziplist.c`` (ziplist), ``intset.c`` (intset),
``zipmap.c`` (zipmap). All multi-byte integers are little endian, except a ziplist's 14- and
32-bit string lengths, which are big endian.

Listpack::

    total_bytes u32 | num_elements u16 (65535: unknown) | entry* | 0xFF
    entry = encoding [data] backlen
      0xxxxxxx                7-bit unsigned int
      10xxxxxx <str>          string, 6-bit length
      110xxxxx yyyyyyyy       13-bit signed int
      1110xxxx yyyyyyyy <str> string, 12-bit length
      0xF0 len u32 <str>      string, 32-bit length
      0xF1 / F2 / F3 / F4     16 / 24 / 32 / 64-bit signed int
    backlen: the entry's size without backlen, in 1 to 5 bytes (7 bits each)

Ziplist::

    zlbytes u32 | zltail u32 | zllen u16 | entry* | 0xFF
    entry = prevlen (1 byte < 254, else 0xFE + u32) encoding [data]
      00pppppp <str>              string, 6-bit length
      01pppppp qqqqqqqq <str>     string, 14-bit length (big endian)
      10000000 len u32be <str>    string, 32-bit length
      0xC0 / D0 / E0 / F0 / FE    int16 / int32 / int64 / int24 / int8
      0xF1 .. 0xFD                immediate 0 .. 12 (low 4 bits minus 1)

Intset: ``encoding u32 (2, 4 or 8) | length u32 | length signed ints of that width``.

Zipmap: ``zmlen u8 | (len key len free value <free bytes>)* | 0xFF`` where a ``len`` is one
byte below 254, else 0xFE + u32.
"""

from __future__ import annotations

import struct

_U32 = struct.Struct("<I")
_U32BE = struct.Struct(">I")
_I16 = struct.Struct("<h")
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")

LISTPACK_HEADER = struct.Struct(
    "<I"  # total bytes of the listpack, header and end byte included
    "H"  # number of elements, 65535 when too many to count here
)
ZIPLIST_HEADER = struct.Struct(
    "<I"  # zlbytes: total bytes, header and end byte included
    "I"  # zltail: offset of the last entry
    "H"  # zllen: number of entries, 65535 when too many to count here
)
INTSET_HEADER = struct.Struct(
    "<I"  # encoding: bytes per integer, 2, 4 or 8
    "I"  # length: number of integers
)
_INTSET_WIDTHS = {2: "h", 4: "i", 8: "q"}
_BACKLEN_STEPS = (128, 16384, 2097152, 268435456)


class EncodingError(ValueError):
    """A blob does not follow its encoding.

    Attributes:
        position: byte offset inside the blob where decoding failed.
    """

    def __init__(self, message: str, position: int) -> None:
        self.position = position
        super().__init__(f"{message} at byte {position} of the blob")


def _check_end(blob: bytes, pos: int, count: int, found: int, name: str) -> None:
    """The entries stop at the end byte, and the header's count (unless 65535) matches."""
    end = len(blob) - 1
    if pos != end or blob[end] != 0xFF:
        raise EncodingError(f"{name} does not end with 0xFF", min(pos, end))
    if count != 0xFFFF and count != found:
        raise EncodingError(f"{name} says {count} elements but holds {found}", end)


def _int24(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 3], "little", signed=True)


def _listpack_entries(blob: bytes) -> list[bytes]:
    size = len(blob)
    if size < LISTPACK_HEADER.size + 1:
        raise EncodingError("listpack shorter than its header", 0)
    total, count = LISTPACK_HEADER.unpack_from(blob)
    if total != size:
        raise EncodingError(f"listpack says {total} bytes but holds {size}", 0)
    out: list[bytes] = []
    pos = LISTPACK_HEADER.size
    end = size - 1
    while pos < end:
        start = pos
        b = blob[pos]
        if b < 0x80:
            out.append(b"%d" % b)
            pos += 1
        elif b < 0xC0:
            n = b & 0x3F
            pos += 1 + n
            out.append(blob[start + 1 : pos])
        elif b < 0xE0:
            if pos + 2 > end:
                raise EncodingError("listpack entry runs past the end", start)
            value = ((b & 0x1F) << 8) | blob[pos + 1]
            out.append(b"%d" % (value - 0x2000 if value >= 0x1000 else value))
            pos += 2
        elif b < 0xF0:
            if pos + 2 > end:
                raise EncodingError("listpack entry runs past the end", start)
            n = ((b & 0x0F) << 8) | blob[pos + 1]
            pos += 2 + n
            out.append(blob[start + 2 : pos])
        elif b == 0xF0:
            if pos + 5 > end:
                raise EncodingError("listpack entry runs past the end", start)
            n = _U32.unpack_from(blob, pos + 1)[0]
            pos += 5 + n
            out.append(blob[start + 5 : pos])
        elif b == 0xF1:
            out.append(b"%d" % _I16.unpack_from(blob, pos + 1)[0])
            pos += 3
        elif b == 0xF2:
            out.append(b"%d" % _int24(blob, pos + 1))
            pos += 4
        elif b == 0xF3:
            out.append(b"%d" % _I32.unpack_from(blob, pos + 1)[0])
            pos += 5
        elif b == 0xF4:
            if pos + 9 > end:
                raise EncodingError("listpack entry runs past the end", start)
            out.append(b"%d" % _I64.unpack_from(blob, pos + 1)[0])
            pos += 9
        else:
            raise EncodingError(f"unknown listpack entry encoding 0x{b:02x}", start)
        entry_bytes = pos - start
        # backlen: 7 bits a byte
        pos += 1 if entry_bytes < 128 else 1 + sum(entry_bytes >= n for n in _BACKLEN_STEPS)
        if pos > end:
            raise EncodingError("listpack entry runs past the end", start)
    _check_end(blob, pos, count, len(out), "listpack")
    return out


def _ziplist_entries(blob: bytes) -> list[bytes]:
    size = len(blob)
    if size < ZIPLIST_HEADER.size + 1:
        raise EncodingError("ziplist shorter than its header", 0)
    total, _tail, count = ZIPLIST_HEADER.unpack_from(blob)
    if total != size:
        raise EncodingError(f"ziplist says {total} bytes but holds {size}", 0)
    out: list[bytes] = []
    pos = ZIPLIST_HEADER.size
    end = size - 1
    while pos < end:
        start = pos
        pos += 5 if blob[pos] == 0xFE else 1  # prevlen
        if pos >= end:
            raise EncodingError("ziplist entry runs past the end", start)
        b = blob[pos]
        kind = b & 0xC0
        if kind == 0x00:
            n = b & 0x3F
            out.append(blob[pos + 1 : pos + 1 + n])
            pos += 1 + n
        elif kind == 0x40:
            n = ((b & 0x3F) << 8) | blob[pos + 1]
            out.append(blob[pos + 2 : pos + 2 + n])
            pos += 2 + n
        elif b == 0x80:
            n = _U32BE.unpack_from(blob, pos + 1)[0]
            out.append(blob[pos + 5 : pos + 5 + n])
            pos += 5 + n
        elif b == 0xC0:
            out.append(b"%d" % _I16.unpack_from(blob, pos + 1)[0])
            pos += 3
        elif b == 0xD0:
            out.append(b"%d" % _I32.unpack_from(blob, pos + 1)[0])
            pos += 5
        elif b == 0xE0:
            if pos + 9 > end:
                raise EncodingError("ziplist entry runs past the end", start)
            out.append(b"%d" % _I64.unpack_from(blob, pos + 1)[0])
            pos += 9
        elif b == 0xF0:
            out.append(b"%d" % _int24(blob, pos + 1))
            pos += 4
        elif b == 0xFE:
            out.append(b"%d" % int.from_bytes(blob[pos + 1 : pos + 2], "little", signed=True))
            pos += 2
        elif 0xF1 <= b <= 0xFD:
            out.append(b"%d" % ((b & 0x0F) - 1))
            pos += 1
        else:
            raise EncodingError(f"unknown ziplist entry encoding 0x{b:02x}", pos)
        if pos > end:
            raise EncodingError("ziplist entry runs past the end", start)
    _check_end(blob, pos, count, len(out), "ziplist")
    return out


def intset_members(blob: bytes) -> list[bytes]:
    """The integers of an intset (ascending), as decimal text.

    Raises:
        EncodingError: a bad width, or a length that does not match the blob's size.
    """
    if len(blob) < INTSET_HEADER.size:
        raise EncodingError("intset shorter than its header", 0)
    width, count = INTSET_HEADER.unpack_from(blob)
    code = _INTSET_WIDTHS.get(width)
    if code is None:
        raise EncodingError(f"intset with integers of {width} bytes", 0)
    if INTSET_HEADER.size + width * count != len(blob):
        raise EncodingError(f"intset of {count} integers in {len(blob)} bytes", 4)
    values = struct.unpack_from(f"<{count}{code}", blob, INTSET_HEADER.size)
    return [b"%d" % value for value in values]


def zipmap_pairs(blob: bytes) -> list[bytes]:
    """A zipmap's keys and values, alternating (Redis 2.4 hashes).

    Raises:
        EncodingError: an entry running past the end, or a missing end byte.
    """
    out: list[bytes] = []
    pos = 1  # zmlen: a count that saturates at 254, not needed
    end = len(blob)
    try:
        while blob[pos] != 0xFF:
            for is_value in (False, True):
                start = pos
                n = blob[pos]
                if n == 0xFE:
                    n = _U32.unpack_from(blob, pos + 1)[0]
                    pos += 5
                elif n == 0xFF:
                    raise EncodingError("zipmap entry without a value", start)
                else:
                    pos += 1
                free = 0
                if is_value:
                    free = blob[pos]
                    pos += 1
                if pos + n + free > end:
                    raise EncodingError("zipmap entry runs past the end", start)
                out.append(blob[pos : pos + n])
                pos += n + free
    except (IndexError, struct.error):
        raise EncodingError("zipmap runs past the end", pos) from None
    if pos != end - 1:
        raise EncodingError("bytes after the zipmap's end", pos + 1)
    return out


def listpack_entries(blob: bytes) -> list[bytes]:
    """The elements of a listpack, in order.

    Raises:
        EncodingError: a bad header, an unknown entry encoding, an entry running past the
            end, a missing end byte, or a wrong element count.
    """
    try:
        return _listpack_entries(blob)
    except (IndexError, struct.error):
        raise EncodingError("listpack entry runs past the end", len(blob)) from None


def ziplist_entries(blob: bytes) -> list[bytes]:
    """The elements of a ziplist, in order.

    Raises:
        EncodingError: as :func:`listpack_entries`.
    """
    try:
        return _ziplist_entries(blob)
    except (IndexError, struct.error):
        raise EncodingError("ziplist entry runs past the end", len(blob)) from None
