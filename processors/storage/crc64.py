"""CRC64-ECMA as OSS computes it (the ``x-oss-hash-crc64ecma`` header; CRC-64/XZ: polynomial
0x42F0E1EBA9EA3693 reflected, register and result inverted — what ``oss2.utils.Crc64``
computes with ``crcmod``). The one module that imports ``fastcrc``.

:mod:`processors.storage.pull` checksums each part as it arrives and
:mod:`processors.storage.partial` combines the parts' CRCs into the file's, to compare with
OSS's. ``fastcrc`` (Rust, carry-less multiply) checksums outside the GIL, where
``crcmod``'s C extension held it and bound the pull's threads by checksumming rather than
the network. The combine works in GF(2) like zlib's ``crc32_combine``, in time logarithmic
in the part's length (``oss2``'s matrix version is far slower per part; the figures:
docs/performance.md).
"""

from __future__ import annotations

import functools

from fastcrc import crc64 as _fastcrc

_REFLECTED = 0xC96C5795D7870F42  # ECMA-182's polynomial, bit-reversed, without x^64
_TOP = 1 << 63  # x^0 in the reflected representation


class Crc64:
    """Incremental CRC64-ECMA."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0  # the CRC of no bytes

    def update(self, data: bytes | memoryview) -> None:
        self.value = _fastcrc.xz(data, self.value)


def checksum(data: bytes | memoryview) -> int:
    """CRC64-ECMA of ``data`` in one call."""
    return int(_fastcrc.xz(data))


def _multiply(a: int, b: int) -> int:
    """a * b modulo the polynomial, both reflected."""
    product, mask = 0, _TOP
    while a:
        if a & mask:
            product ^= b
            a ^= mask
        mask >>= 1
        b = (b >> 1) ^ _REFLECTED if b & 1 else b >> 1
    return product


# _POWERS[k] is x^(2^k): enough for any length (2^64 bits).
_POWERS = [_TOP >> 1]
for _ in range(63):
    _POWERS.append(_multiply(_POWERS[-1], _POWERS[-1]))


def combine(crc1: int, crc2: int, length2: int) -> int:
    """CRC of A+B from CRC(A), CRC(B) and len(B) in bytes."""
    if not crc1:  # the product below is then 0: no need to raise x to len(B) (a file's first part)
        return crc2
    return _multiply(_shift(length2), crc1) ^ crc2


@functools.lru_cache(maxsize=64)
def _shift(length: int) -> int:
    """x to the power of ``length`` bytes' bits: kept, as a file's parts are all one size
    but the last (each ~40 us of pure Python)."""
    shift, bits, k = _TOP, length * 8, 0
    while bits:
        if bits & 1:
            shift = _multiply(_POWERS[k], shift)
        bits >>= 1
        k += 1
    return shift
