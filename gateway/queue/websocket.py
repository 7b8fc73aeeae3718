"""The little of WebSocket (RFC 6455) a queue watch needs: the opening handshake's answer,
server frames (binary, unmasked) and a reader of client frames (masked) that answers pings
and closes. :mod:`gateway.queue.door` takes a connection over with :func:`take_over` once
it has answered 101; from then on the HTTP/1.1 server no longer reads it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x1, 0x2, 0x8, 0x9, 0xA
MAX_CLIENT_FRAME = 64 * 1024  # a watcher sends pings and closes, nothing large


def accept_key(key: bytes) -> bytes:
    return base64.b64encode(hashlib.sha1(key.strip() + _GUID).digest())


def handshake(key: bytes) -> bytes:
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
        b"sec-websocket-accept: " + accept_key(key) + b"\r\n\r\n"
    )


def frame(payload: bytes, opcode: int = OP_BINARY) -> bytes:
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


class Socket(asyncio.Protocol):
    """A taken-over connection: :attr:`closed` is set when the client closes or leaves."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.closed = asyncio.Event()
        self._buf = bytearray()

    def send(self, payload: bytes) -> None:
        if not self.closed.is_set():
            self.transport.write(frame(payload))

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while True:
            parsed = self._next()
            if parsed is None:
                return
            opcode, payload = parsed
            if opcode == OP_PING:
                self.transport.write(frame(payload, OP_PONG))
            elif opcode == OP_CLOSE:
                self.transport.write(frame(payload[:2], OP_CLOSE))
                self.close()
                return

    def _next(self) -> tuple[int, bytes] | None:
        buf = self._buf
        if len(buf) < 2:
            return None
        opcode, n = buf[0] & 0x0F, buf[1] & 0x7F
        masked = buf[1] & 0x80
        at = 2
        if n == 126:
            if len(buf) < 4:
                return None
            n, at = struct.unpack_from("!H", buf, 2)[0], 4
        elif n == 127:
            if len(buf) < 10:
                return None
            n, at = struct.unpack_from("!Q", buf, 2)[0], 10
        if n > MAX_CLIENT_FRAME:
            self.close()
            return None
        mask = bytes(buf[at : at + 4]) if masked else b""
        at += 4 if masked else 0
        if len(buf) < at + n:
            return None
        payload = bytes(buf[at : at + n])
        if masked:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        del buf[: at + n]
        return opcode, payload

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def eof_received(self) -> bool | None:
        self.closed.set()
        return None

    def close(self) -> None:
        self.closed.set()
        self.transport.close()


def take_over(transport: asyncio.Transport, rest: bytes = b"") -> Socket:
    """Read ``transport`` as a WebSocket from now on (``rest``: bytes already received)."""
    sock = Socket(transport)
    transport.set_protocol(sock)
    if rest:
        sock.data_received(rest)
    transport.resume_reading()
    return sock
