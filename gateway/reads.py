"""A client connection's reads into one kept buffer, for clients that send large bodies.

uvloop reads a connection into its loop's 256 KiB buffer and copies each read into a new
``bytes`` for ``data_received``: for a 1 MB request behind a repeated head that is the
first 256 KiB of it (the rest is relayed, ``gateway.splice``), about 82 % of the gateway's
instructions per call under callgrind and memory the copy finds cold. Read as a buffered
protocol (``get_buffer``/``buffer_updated``, which uvloop supports), the read lands in
:data:`READS`' buffer, one per process and warm like uvloop's own, and the body part of it
goes to the replica as a view of that buffer: no copy of ours.

The buffer is only lent: once the replica's socket took the view (the common case), it is
free for the next read; when anything may still hold it (a write the socket did not take
whole, a request waiting for its replica connection), :meth:`ReadBuffer.renew` gives the
next reads a new buffer and the old one goes with its last view. Any other read is copied
into ``bytes`` as uvloop would, and the connection goes back to plain reads
(``HttpConnection.buffer_updated``).
"""

from __future__ import annotations

import asyncio
import mmap
from typing import Final
from typing import Protocol as TypingProtocol

READ_BYTES: Final = 262_144  # uvloop's own read size


class ReadBuffer:
    """The process's kept read buffer: an anonymous mapping, so it starts on a page (the
    kernel copies into a buffer 16 bytes past one at 1.5x the cost: gateway.splice)."""

    __slots__ = ("lent", "map", "renewed", "view")

    def __init__(self) -> None:
        self.lent = 0  # reads that went on as views (what the tests observe)
        self.renewed = 0  # buffers left to views that may still be held
        self.map = mmap.mmap(-1, READ_BYTES)
        self.view = memoryview(self.map)

    def lend(self, start: int, end: int) -> memoryview:
        """Bytes ``start:end`` of the buffer, as a view that goes on (see :meth:`renew`)."""
        self.lent += 1
        return self.view[start:end]

    def renew(self) -> None:
        """Leave the buffer to whatever still holds views of it; reads go to a new one."""
        self.renewed += 1
        self.map = mmap.mmap(-1, READ_BYTES)
        self.view = memoryview(self.map)


READS: Final = ReadBuffer()


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
        return READS.view

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
