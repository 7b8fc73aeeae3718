"""A client connection's reads into kept buffers, for clients that send large bodies.

uvloop reads a connection 256 KiB at a time into its loop's buffer and copies each read into
a new ``bytes`` for ``data_received``. For a 1 MB request behind a repeated head that was the
first 256 KiB of it (the rest relayed, ``gateway.splice``): about four fifths of the
gateway's instructions per call under callgrind, into memory the copy finds cold, and the
replica got the request in two writes, woken for each. Read as a buffered protocol
(``get_buffer``/``buffer_updated``, which uvloop supports), a read lands in one of
:data:`READS`' buffers, large enough for the whole of such a request when the client's
socket already holds it; its body goes to the replica as a view of the buffer, with its
head in one write, as nginx sends it.

A buffer is only lent. Each lent view holds the mapping (through its own managed buffer)
until the last view of it is gone, wherever it went (a write the replica's socket did not
take whole, a request queued or waiting for its replica connection): a buffer whose
mapping is referenced only by us is free (:meth:`ReadBuffers.take`). Reads go to a free
kept buffer, else to a new one.
"""

from __future__ import annotations

import asyncio
import mmap
import sys
from typing import Final
from typing import Protocol as TypingProtocol

# A read's room: a request of a few MB the client's socket already holds comes in one read
# (uvloop's own is 256 KiB). Only the pages a read touches are ever backed.
READ_BYTES: Final = 4 << 20
KEPT: Final = 4  # buffers kept for reuse (warm); more are made while views hold these


class ReadBuffer:
    """An anonymous mapping, so it starts on a page (the kernel copies into a buffer 16
    bytes past one at 1.5x the cost: gateway.splice)."""

    __slots__ = ("map",)

    def __init__(self) -> None:
        self.map = mmap.mmap(-1, READ_BYTES)


def _refs(buffer: ReadBuffer) -> int:
    return sys.getrefcount(buffer.map)


# What a buffer's mapping counts with no view of it alive (the same expression as the check,
# compiled or not: each live view's managed buffer adds one).
_FREE_REFS: Final = _refs(ReadBuffer())


class ReadBuffers:
    """The process's read buffers: the one reads go to, and spares."""

    __slots__ = ("current", "held", "lent", "made", "spares")

    def __init__(self) -> None:
        self.current = ReadBuffer()
        self.spares: list[ReadBuffer] = []
        # What the tests observe: reads that went on as views, reads that found the buffer
        # still held by one, buffers made (more than KEPT only while views held them all).
        self.lent = self.held = 0
        self.made = 1

    def take(self) -> memoryview:
        """Room for the next read: the current buffer if no view of it is alive, else a
        free spare (the current one kept as a spare if there is room), else a new one."""
        current = self.current
        if _refs(current) <= _FREE_REFS:
            return memoryview(current.map)
        self.held += 1
        spares = self.spares
        found = None
        for spare in spares:
            if _refs(spare) <= _FREE_REFS:
                found = spare
                break
        if found is not None:
            spares.remove(found)
        else:
            found = ReadBuffer()
            self.made += 1
        if len(spares) < KEPT - 1:
            spares.append(current)
        self.current = found
        return memoryview(found.map)

    def lend(self, start: int, end: int) -> memoryview:
        """Bytes ``start:end`` of the last read, as a view that goes on."""
        self.lent += 1
        return memoryview(self.current.map)[start:end]

    def copy(self, nbytes: int) -> bytes:
        """The last read's ``nbytes`` as ``bytes`` (what uvloop's own read would give)."""
        return self.current.map[:nbytes]


READS: Final = ReadBuffers()


class Reader(TypingProtocol):
    """What a connection read through :class:`BufferedReads` implements."""

    def buffer_updated(self, nbytes: int) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


class BufferedReads(asyncio.BufferedProtocol):
    """The protocol a transport calls while its connection reads into :data:`READS`
    (``transport.set_protocol``): a buffered protocol to uvloop and to asyncio's own loop."""

    def __init__(self, conn: Reader) -> None:
        self.conn = conn

    def get_buffer(self, sizehint: int) -> memoryview:
        return READS.take()

    def buffer_updated(self, nbytes: int) -> None:
        self.conn.buffer_updated(nbytes)

    def eof_received(self) -> bool | None:
        return self.conn.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()
