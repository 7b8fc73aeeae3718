"""HTTP/1.1 pieces both sides of the gateway share: the client-facing server
(:mod:`gateway.http.server`) and the replica connections (:mod:`gateway.http.upstream`)."""

from __future__ import annotations

import asyncio
import os
from http import HTTPStatus

from gateway.http.writes import socket_fd

CRLF = b"\r\n"


class ReadPausable(asyncio.Protocol):
    """Backpressure on a connection's reading side; client and upstream connections both
    pause one side while the other side's buffer drains."""

    transport: asyncio.Transport | None
    closed: bool
    _reading_paused: bool
    _watched: int  # -1 until :meth:`watched_fd` is asked for

    def watched_fd(self) -> int:
        """A duplicate of the connection's socket for the event loop to watch (uvloop
        refuses a transport's own: ``gateway.http.splice``), made once and kept until
        :meth:`close_watched`; -1 without a socket."""
        if self._watched < 0 and self.transport is not None:
            fd = socket_fd(self.transport)
            if fd >= 0:
                self._watched = os.dup(fd)
        return self._watched

    def close_watched(self) -> None:
        """When the connection is lost (nothing watches the duplicate by then)."""
        if self._watched >= 0:
            os.close(self._watched)
            self._watched = -1

    def pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = False
            self.transport.resume_reading()


def request_line_refusal(head: bytes) -> tuple[bool, str | None]:
    """Whether the request line at the start of ``head`` is complete, and why it is refused
    (None: fine, or not complete yet). llhttp takes an HTTP/0.9-shaped line (``GET /``) as a
    request or waits for more; nginx answers 400 at once, and so do we. Empty lines before
    the request line are allowed (RFC 9112 §2.2)."""
    n = len(head)
    start = 0
    while start < n:  # indexing and slicing are native where bytes methods are not
        c = head[start]
        if c == 10:
            start += 1
        elif c == 13 and start + 1 < n and head[start + 1] == 10:
            start += 2
        else:
            break
    end = head.find(b"\n", start)
    if end == -1:
        return False, None
    line = head[start:end]  # a CR before the LF changes neither test below
    # Three parts between two single spaces, the last a version.
    if line.count(b" ") != 2 or not line[line.rfind(b" ") + 1 :].startswith(b"HTTP/"):
        return True, "the request line must read METHOD target HTTP/1.1 (HTTP/0.9 is not served)"
    return True, None


_STATUS_LINES: dict[int, bytes] = {}
EAS_PHRASES = {450: "Queue Full"}  # EAS's own status: the service's queue is full, retry


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = EAS_PHRASES.get(status, "")
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")
    return line
