"""Buffers the pull reads a socket into and writes a file from.

Where a buffer starts matters to the kernel's copies: into and out of a buffer that begins
16 bytes past a cache line (where glibc puts a big ``malloc`` block, and so a fresh
``bytearray`` of 1 MiB) they are slower than into one on a page boundary
(docs/performance.md). Invariant: a buffer here is an anonymous mapping of its own, so it
starts on a page.
"""

from __future__ import annotations

import mmap


def page_aligned(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes that starts on a page boundary (unmapped when the
    last view of it goes)."""
    return memoryview(mmap.mmap(-1, size))
