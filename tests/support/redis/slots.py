"""A reference for hash slots, independent of the code under test."""

from __future__ import annotations


def crc16_xmodem(data: bytes) -> int:
    """Bit-by-bit CRC16-XMODEM, independent of the code under test (Redis Cluster spec)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc
