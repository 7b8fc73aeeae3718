"""The rest of a large request body moved from the client's socket to the replica's without
passing through uvloop or a Python object: by the kernel (``splice(2)`` through a pipe,
:class:`BodySplice`), or through one buffer of ours (``read`` then ``write``,
:class:`BodyRelay`).

Relayed by the transports, each 256 KiB of a body is copied three times: out of the client's
socket, into a new ``bytes`` by uvloop, into the replica's socket. :class:`BodyRelay` makes
the two copies nginx makes, out of one socket into a kept buffer and from it into the other,
and hands Python no read: it is the default for a body with at least ``RELAY_MIN`` bytes still
to come. Splicing moves the socket's pages into a pipe and from it; from
``GatewaySettings.splice_min_bytes`` still to come (0, the default, turns it off): it saves
the gateway's copies, but a replica on the same host then reads spliced pages at more cost
than the gateway saves (docs/performance.md), so it is opt-in.
Either is only used for a body of known length
that goes to one replica connection, after what that connection's transport still holds: the
bytes arrive in order and exactly the body is taken from the client, so what follows it (a
pipelined request) is still read by the transport.

The event loop watches duplicates of both sockets (uvloop refuses a transport's own), which
each connection keeps for its life (``ReadPausable.watched_fd``), while the client's
transport is paused; pipes and buffers are kept for the next body when they end empty.
Anything unusual — the client's end or an error on either socket — hands reading back to the
transport, which then meets the same condition and handles it as always (a closed client, a
failed replica); the bytes still in the pipe or buffer are then lost, as they would be in a
transport's buffer, and the exchange fails anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import mmap
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Final

SPLICE_MIN: Final = 0  # body bytes still to come from which a body is spliced; 0: never
PIPE_BYTES: Final = 1 << 20  # asked of the kernel (its default pipe-max-size); 64 KiB if refused
_SETPIPE_SZ: Final = 1031  # fcntl.F_SETPIPE_SZ (named in the module from Python 3.10 on Linux)
_FLAGS: Final = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)

AVAILABLE: Final = hasattr(os, "splice")  # Linux
KEPT_PIPES: Final = 64  # empty pipes kept for the next splice (two descriptors each)
RELAY_MIN: Final = 65_536  # body bytes still to come from which a body is relayed directly
RELAY_BYTES: Final = 1 << 20  # a relay's buffer
KEPT_BUFFERS: Final = 16  # empty buffers kept for the next relay

_pipes: list[tuple[int, int, int]] = []  # (read end, write end, bytes it holds)


def _pipe() -> tuple[int, int, int]:
    if _pipes:
        return _pipes.pop()
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return r, w, fcntl.fcntl(w, _SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        return r, w, 65_536  # the default size


class BodyMove(ABC):
    """Moves ``left`` bytes from ``client_fd`` to ``upstream_fd`` (duplicates the loop may
    watch, see ``ReadPausable.watched_fd``), once ``queued()`` (the bytes the replica connection's
    transport still holds for that socket) is 0: its own go first. ``moved(n)`` is told of
    each read from the client (0: reading it again after a pause of ours); ``ended(whole)``
    once: True when all ``left`` bytes reached the replica's socket, False when reading goes
    back to the transport. The two moves, client → held and held → replica, are a
    subclass's: ``held`` bytes are between them, and the client is read while
    :meth:`_has_room`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        client_fd: int,
        upstream_fd: int,
        queued: Callable[[], int],
        left: int,
        moved: Callable[[int], None],
        ended: Callable[[bool], None],
    ) -> None:
        self.loop = loop
        self.client = client_fd
        self.upstream = upstream_fd
        self.left = left
        self.held = 0
        self._queued = queued
        self._moved = moved
        self._ended = ended
        self.reading = self._writing = False
        self.done = False
        self._open()

    def start(self) -> None:
        """Move at once what the client's socket already holds (often the whole rest: the
        loop then watches nothing, and the client's transport is never paused), then wait
        for more if it must: a body already in the socket adds no wait for the loop."""
        while self._read():
            if not self._flush() or not self.left:
                break
        if not self.done:
            self._drain()

    def stop(self) -> None:
        """End now, reading back to the transport (the request ended another way)."""
        self._end(False)

    # -- loop callbacks -------------------------------------------------------------------

    def _on_readable(self) -> None:
        if self._read():
            self._drain()

    def _drain(self) -> None:
        """Also the replica's socket's writable callback while the held bytes wait for it."""
        if not self._flush():
            if not self.done:
                # The replica's socket is full, or its transport's bytes go first: wait until
                # it takes more, reading the client meanwhile only while there is room.
                self._write_upstream(True)
                self._read_client(self.left > 0 and self._has_room())
        elif self.left:
            self._write_upstream(False)
            self._read_client(True)
        else:
            self._end(True)

    # -- the two moves (a subclass's) -----------------------------------------------------

    @abstractmethod
    def _read(self) -> bool:
        """Client's socket → held; False when nothing came (or this ended)."""

    @abstractmethod
    def _flush(self) -> bool:
        """Held → the replica's socket, after its transport's own bytes; True once empty."""

    @abstractmethod
    def _has_room(self) -> bool:
        """Whether the client may be read now (what holds the bytes has room)."""

    @abstractmethod
    def _open(self) -> None:
        """Take what holds the bytes (a kept one if there is)."""

    @abstractmethod
    def _release(self) -> None:
        """What held the bytes, at the end (kept for the next when empty)."""

    def _took(self, n: int) -> bool:
        """``n`` bytes were read from the client (0: its end, which the transport reads)."""
        if n == 0:
            self._end(False)
            return False
        self.left -= n
        self.held += n
        self._moved(n)
        return True

    # -- internals ------------------------------------------------------------------------

    def _read_client(self, on: bool) -> None:
        if on and not self.reading:
            self.loop.add_reader(self.client, self._on_readable)
            self._moved(0)  # a pause of ours is not the client's stall
        elif not on and self.reading:
            self.loop.remove_reader(self.client)
        self.reading = on

    def _write_upstream(self, on: bool) -> None:
        if on and not self._writing:
            self.loop.add_writer(self.upstream, self._drain)
        elif not on and self._writing:
            self.loop.remove_writer(self.upstream)
        self._writing = on

    def _end(self, whole: bool) -> None:
        if self.done:
            return
        self.done = True
        self._read_client(False)
        self._write_upstream(False)
        self._release()
        self._ended(whole)


class BodySplice(BodyMove):
    """Through a pipe, by ``splice(2)``: no copy the gateway makes at all."""

    def _open(self) -> None:
        self.pipe_r, self.pipe_w, self.room = _pipe()

    def _has_room(self) -> bool:
        return self.held < self.room

    def _read(self) -> bool:
        want = min(self.left, self.room - self.held)
        if not want:
            return False  # the pipe is full (0 would read as the client's end)
        try:
            n = os.splice(self.client, self.pipe_w, want, flags=_FLAGS)
        except BlockingIOError:
            return False
        except OSError:
            self._end(False)  # the transport meets the same error
            return False
        return self._took(n)

    def _flush(self) -> bool:
        while self.held and not self._queued():
            try:
                self.held -= os.splice(self.pipe_r, self.upstream, self.held, flags=_FLAGS)
            except BlockingIOError:
                return False
            except OSError:
                self._end(False)  # the replica failed: its transport says so
                return False
        return not self.held

    def _release(self) -> None:
        if self.held == 0 and len(_pipes) < KEPT_PIPES:
            _pipes.append((self.pipe_r, self.pipe_w, self.room))
        else:  # bytes left in it are lost with it (the exchange fails anyway)
            for fd in (self.pipe_r, self.pipe_w):
                with contextlib.suppress(OSError):
                    os.close(fd)


_buffers: list[memoryview] = []  # empty relay buffers


def _readinto_py(fd: int, buffer: memoryview) -> int:
    try:
        return os.readv(fd, [buffer])
    except BlockingIOError:
        return -1


def _write_py(fd: int, data: bytes | memoryview) -> int:
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return -1


# A relay's reads and writes: -1 when the socket has nothing yet (or no room), OSError on an
# error. gateway/http/_nowait.c's when built: they hold the GIL and raise nothing for the common
# "not now" (each exception and GIL release cost more than a relay's wakeup saves otherwise).
try:
    from gateway.http import _nowait

    _readinto, _write = _nowait.readinto, _nowait.write
except ImportError:  # built without C (OPENEAS_PURE_PYTHON=1)
    _readinto, _write = _readinto_py, _write_py


class BodyRelay(BodyMove):
    """Through one buffer of ours (``read`` into it, ``write`` from it: the kernel's two
    copies, which nginx makes too), refilled once the replica's socket took all of it. The
    buffer is an anonymous mapping, so it starts on a page (the kernel's copies into and
    out of a buffer off a page boundary are slower: docs/performance.md)."""

    def _open(self) -> None:
        self.buffer = _buffers.pop() if _buffers else memoryview(mmap.mmap(-1, RELAY_BYTES))
        self.sent = 0  # of the bytes in the buffer

    def _has_room(self) -> bool:
        return not self.held

    def _read(self) -> bool:
        want = 0 if self.held else min(self.left, len(self.buffer))
        if not want:
            return False  # still held (0 would read as the client's end)
        try:
            n = _readinto(self.client, self.buffer[:want])
        except OSError:
            self._end(False)  # the transport meets the same error
            return False
        if n < 0:
            return False
        self.sent = 0
        return self._took(n)

    def _flush(self) -> bool:
        while self.held and not self._queued():
            try:
                n = _write(self.upstream, self.buffer[self.sent : self.sent + self.held])
            except OSError:
                self._end(False)  # the replica failed: its transport says so
                return False
            if n < 0:
                return False
            self.sent += n
            self.held -= n
        return not self.held

    def _release(self) -> None:
        if len(_buffers) < KEPT_BUFFERS:
            _buffers.append(self.buffer)  # what it still held is lost (the exchange fails)
