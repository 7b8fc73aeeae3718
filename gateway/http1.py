"""HTTP/1.1 pieces both sides of the gateway share: the client-facing server
(:mod:`gateway.server`) and the replica connections (:mod:`gateway.upstream`)."""

from __future__ import annotations

import asyncio
from http import HTTPStatus

CRLF = b"\r\n"


class ReadPausable(asyncio.Protocol):
    """Backpressure on a connection's reading side; client and upstream connections both
    pause one side while the other side's buffer drains."""

    transport: asyncio.Transport | None
    closed: bool
    _reading_paused: bool

    def pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = False
            self.transport.resume_reading()


_STATUS_LINES: dict[int, bytes] = {}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")
    return line
