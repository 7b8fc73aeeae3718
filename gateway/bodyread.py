"""Large request bodies read straight into reused buffers.

An event loop hands a plain protocol each read as new ``bytes``: for a 1 MB tensor that is
a copy of every byte in user space (uvloop reads into a buffer of its own, then copies it
out) in reads of at most 256 KiB. When the rest of a body of known length is large,
:class:`HttpConnection <gateway.server.HttpConnection>` installs a :class:`BodyReader` as
its transport's protocol instead: a *buffered* protocol (``get_buffer`` /
``buffer_updated``), so the kernel copies the body into a buffer of ours, in reads of up to
:data:`READ_BYTES`, and the views of it go on to the replica as they are. The reader stays
for the rest of the connection (one that sent a large body sends more, and each change of
protocol costs the loop a stop and a start of reading): between bodies it reads into a small
buffer and hands the connection a copy, as the loop would. A large buffer is used
again only once nothing holds a view of it any more (a write still queued on the replica's
transport does), which a bytearray tells by refusing to be resized.

Compiled with the proxy (``gateway/native.py``): it runs once per read of such a connection.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

READ_BYTES: Final = 1024 * 1024  # one buffer, the most one read of a body takes
HEAD_READ_BYTES: Final = 65_536  # a read between bodies (what the loop would read)
BUFFERED_FROM: Final = 256 * 1024  # body bytes still to come for the buffered reader
KEPT_BUFFERS: Final = 16  # per process: what a few concurrent uploads need, at most 16 MiB


def unshared(buf: bytearray) -> bool:
    """Whether no view of ``buf`` is alive (a bytearray with exports cannot be resized)."""
    try:
        buf.append(0)
    except BufferError:
        return False
    del buf[-1]
    return True


class Buffers:
    """The process's read buffers: ones no view holds any more are taken again, the oldest
    first; past :data:`KEPT_BUFFERS` the oldest is let go (freed when its last view is)."""

    __slots__ = ("kept",)

    def __init__(self) -> None:
        self.kept: list[bytearray] = []

    def take(self) -> bytearray:
        kept = self.kept
        for i in range(len(kept)):
            buf = kept[i]
            if unshared(buf):
                del kept[i]
                kept.append(buf)  # lent again: checked last next time
                return buf
        buf = bytearray(READ_BYTES)
        unshared(buf)  # (its first resize reallocates: done now, not when it is checked)
        if len(kept) >= KEPT_BUFFERS:
            del kept[0]
        kept.append(buf)
        return buf


BUFFERS = Buffers()
# Reads between bodies, of every reader in the process: copied out as soon as they are read
# (the loop reads one connection at a time), so one buffer, not one per connection.
HEAD_VIEW: Final = memoryview(bytearray(HEAD_READ_BYTES))


class Reading(Protocol):
    """The connection a reader reads for (:class:`gateway.server.HttpConnection`, which
    imports this module; its calls from here are a few per read of a large body)."""

    body_left: int  # body bytes still to come (0: a head, or a body the parser reads)

    def body_read(self, data: memoryview) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def eof_received(self) -> bool | None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...


class BodyReader(asyncio.BufferedProtocol):
    """The protocol of a connection once the large rest of a request body is to be read:
    reads a body into :data:`BUFFERS` and hands each read to the connection as a view;
    reads anything else (heads, bodies the parser reads) into a small buffer and hands the
    connection a copy; passes every other event on to it."""

    def __init__(self, conn: Reading) -> None:
        self.conn = conn
        self.buf: bytearray | None = None  # the large buffer of the last body read
        self.in_body = False  # what the last get_buffer handed out

    def get_buffer(self, sizehint: int) -> memoryview:
        left = self.conn.body_left
        self.in_body = left > 0
        if not left:
            return HEAD_VIEW
        buf = self.buf
        if buf is None or not unshared(buf):
            buf = self.buf = BUFFERS.take()
        # Never past the body: what follows it is the next request's, for the parser.
        return memoryview(buf)[: min(left, READ_BYTES)]

    def buffer_updated(self, nbytes: int) -> None:
        if not self.in_body:
            self.conn.data_received(bytes(HEAD_VIEW[:nbytes]))
            return
        buf = self.buf
        assert buf is not None
        self.conn.body_read(memoryview(buf)[:nbytes])

    def data_received(self, data: bytes) -> None:
        self.conn.data_received(data)  # a loop that does not read into buffers

    def eof_received(self) -> bool | None:
        return self.conn.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()
