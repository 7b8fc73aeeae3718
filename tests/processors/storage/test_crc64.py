"""CRC64-ECMA (processors.storage.crc64) against the catalogue's vectors and oss2's own CRC."""

from __future__ import annotations

import random

import oss2.utils
import pytest

from processors.storage.crc64 import Crc64, checksum, combine


def crc(data: bytes) -> int:
    c = Crc64()
    c.update(data)
    return c.value


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"123456789", 0x995DC9BBDF1939FA),  # CRC-64/XZ check value (RevEng catalogue)
        (b"a", 0x330284772E652B05),
        (b"\x00" * 32, 0xC95AF8617CD5330C),
    ],
)
def test_known_vectors(data: bytes, expected: int) -> None:
    assert crc(data) == checksum(data) == expected


@pytest.mark.parametrize("size", [1, 7, 8, 63, 64, 65, 4095, 65536, 1_000_003])
def test_matches_oss2(size: int) -> None:
    data = random.Random(size).randbytes(size)
    theirs = oss2.utils.Crc64()
    theirs.update(data)
    assert crc(data) == theirs.crc


def test_incremental_updates_at_odd_boundaries_equal_one_update() -> None:
    rng = random.Random(3)
    data = rng.randbytes(300_001)
    c = Crc64()
    at = 0
    while at < len(data):
        step = rng.choice([1, 2, 3, 7, 15, 17, 4096, 65537])
        c.update(memoryview(data)[at : at + step])
        at += step
    assert c.value == crc(data)


@pytest.mark.parametrize(("split", "size"), [(0, 10), (10, 10), (1, 2), (8 << 20, (8 << 20) + 5)])
def test_combine_of_parts_is_the_whole(split: int, size: int) -> None:
    data = random.Random(split).randbytes(size)
    a, b = data[:split], data[split:]
    assert combine(crc(a), crc(b), len(b)) == crc(data)


def test_combining_parts_of_one_size_in_turn_is_the_whole() -> None:
    """As a file's parts are checked: the same length again and again, then a shorter one."""
    data = random.Random(5).randbytes(4 * 1000 + 7)
    parts = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    for _ in range(2):  # the second time with every length's shift already known
        whole = 0
        for part in parts:
            whole = combine(whole, crc(part), len(part))
        assert whole == crc(data)
