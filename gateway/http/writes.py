"""A connection's writes, shared by both doors' connections: several pieces of one message
in one system call, and that call made at once, on the socket, when nothing waits.

uvloop's ``transport.write`` and ``os.write`` (which releases the GIL around the call) each
cost a predict call more than its own work (docs/performance.md); ``gateway/http/_nowait.c``
writes holding the GIL. :class:`Sender` writes a small message straight to the connection's
socket when the transport holds nothing unsent and is not closing — what uvloop's own write
would do then — and hands the transport whatever the socket does not take, or an error, so
it keeps the order and reports the error as always. (The body splice,
:mod:`gateway.http.splice`, writes on the socket under the same condition.) Invariant: a
write goes on the socket itself only when the transport holds nothing unsent, so the order
of bytes is the order of writes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Final

# Bytes in all: joined below (cheaper than a vectored write), else vectored. Final: compiled,
# a plain module constant is a dict lookup per call.
JOIN_BELOW: Final = 65_536

Chunk = bytes | memoryview


def one_write(parts: Sequence[Chunk]) -> Chunk | None:
    """``parts`` as one write: the one part, or small ones joined; None when they are too
    large to join (write them vectored: a large body is not copied to join its head)."""
    n = len(parts)
    if n == 1:
        return parts[0]
    if (len(parts[0]) + len(parts[1]) if n == 2 else sum(map(len, parts))) < JOIN_BELOW:
        return b"".join(parts)
    return None


def write_parts(transport: asyncio.WriteTransport, parts: Sequence[Chunk]) -> None:
    """Write ``parts`` in one call (see :func:`one_write`)."""
    whole = one_write(parts)
    if whole is not None:
        transport.write(whole)
    else:
        transport.writelines(parts)


def send_nowait(fd: int, data: Chunk) -> int:
    """The bytes of ``data`` the non-blocking socket ``fd`` did not take: 0 when it took
    all, all of them when it took none (full, or an error its transport meets on its own
    write). ``gateway/http/_nowait.c`` when built: it holds the GIL, which ``os.write`` releases
    at a cost above the call's, and its 0 is a cached int where a count would be a new one."""
    try:
        return len(data) - os.write(fd, data)
    except OSError:
        return len(data)


def sendv_nowait(fd: int, head: bytes, body: Chunk) -> int:
    """:func:`send_nowait` of ``head`` then ``body``, in one call without joining them."""
    total = len(head) + len(body)
    try:
        return total - os.writev(fd, (head, body))
    except OSError:
        return total


def _native() -> tuple[Callable[[int, Chunk], int], Callable[[int, bytes, Chunk], int]]:
    try:
        from gateway.http._nowait import send, sendv
    except ImportError:  # built without C (OPENEAS_PURE_PYTHON=1)
        return send_nowait, sendv_nowait
    return send, sendv


_NATIVE: Final = _native()
SEND: Final = _NATIVE[0]
SENDV: Final = _NATIVE[1]


def socket_fd(transport: asyncio.BaseTransport) -> int:
    """The descriptor of ``transport``'s socket, -1 without one."""
    sock = transport.get_extra_info("socket")
    return sock.fileno() if sock is not None else -1


class Sender:
    """One connection's writes (see the module's docstring). The transport's methods are
    bound once: looked up per call they cost more."""

    __slots__ = ("_closing", "_fd", "_pending", "_send", "_sendv", "_write", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._send = SEND
        self._sendv = SENDV
        self._write = transport.write
        self._pending = transport.get_write_buffer_size
        self._closing = transport.is_closing
        self._fd = socket_fd(transport)

    def _direct(self, size: int) -> bool:
        """Whether ``size`` bytes go on the socket now: small, and nothing is ahead of them.
        Not while closing: a closed transport's descriptor may be another socket's now."""
        return size < JOIN_BELOW and self._fd >= 0 and not self._pending() and not self._closing()

    def send(self, data: Chunk) -> None:
        """``data``, after everything written before it."""
        if self._direct(len(data)):
            left = self._send(self._fd, data)
            if not left:
                return
            data = data[len(data) - left :]
        self._write(data)

    def pair(self, head: bytes, body: Chunk) -> None:
        """A head and its body in one write: :meth:`parts` of the two, without the tuple
        or the joined copy (every predict call writes a pair)."""
        size = len(head) + len(body)
        if not self._direct(size):
            self.transport.writelines((head, body))
            return
        left = self._sendv(self._fd, head, body)
        if not left:
            return
        if left > len(body):  # some of the head is left too
            self._write(head[len(head) - (left - len(body)) :])
            self._write(body)
        else:
            self._write(body[len(body) - left :])

    def parts(self, parts: Sequence[Chunk]) -> None:
        """``parts`` in one call (see :func:`one_write`)."""
        whole = one_write(parts)
        if whole is not None:
            self.send(whole)
        else:
            self.transport.writelines(parts)
