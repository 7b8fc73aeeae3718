"""HTTP/2 as the gRPC relay writes it (RFC 9113), as pure functions over bytes: frame
headers, the control frames, and a header-block encoder that never touches the peer's HPACK
dynamic table, so blocks it makes can be cached and mixed into any connection.

Nothing here does I/O; :mod:`gateway.grpc.relay` reads and writes with these.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from urllib.parse import quote

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (§6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9

# Flags.
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# SETTINGS identifiers (§6.5.2).
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6

# Error codes (§7).
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0x7, 0x8, 0xB

DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1
# The relay never advertises a larger frame size, so every frame it receives fits any peer
# (whose limit is at least this) and passes with only its stream id rewritten.
FRAME_MAX = 16_384

# A frame header as (length << 8 | type, flags, stream): the 24-bit length and the type
# share one 32-bit field, so a header packs and unpacks in one call.
HEAD = struct.Struct(">IBI")
_U32 = struct.Struct(">I")
_SETTING = struct.Struct(">HI")
_GOAWAY = struct.Struct(">II")


Bytes = bytes | memoryview  # frames are read and passed on without copies


class ProtocolError(Exception):
    """The peer broke HTTP/2: the connection ends with GOAWAY(PROTOCOL_ERROR)."""


def head(length: int, kind: int, flags: int, stream: int) -> bytes:
    """A 9-byte frame header."""
    return HEAD.pack(length << 8 | kind, flags, stream & MAX_WINDOW)


def parse_head(buf: Bytes, at: int) -> tuple[int, int, int, int]:
    """``(length, type, flags, stream)`` of the frame header at ``buf[at:at + 9]``."""
    length_kind, flags, stream = HEAD.unpack_from(buf, at)
    return length_kind >> 8, length_kind & 0xFF, flags, stream & MAX_WINDOW


def settings(values: Iterable[tuple[int, int]]) -> bytes:
    payload = b"".join(_SETTING.pack(k, v) for k, v in values)
    return head(len(payload), SETTINGS, 0, 0) + payload


SETTINGS_ACK = head(0, SETTINGS, ACK, 0)


def parse_settings(payload: Bytes) -> list[tuple[int, int]]:
    if len(payload) % 6:
        raise ProtocolError("SETTINGS payload is not a multiple of 6 octets")
    return [_SETTING.unpack_from(payload, i) for i in range(0, len(payload), 6)]


def window_update(stream: int, increment: int) -> bytes:
    return head(4, WINDOW_UPDATE, 0, stream) + _U32.pack(increment)


def parse_u32(payload: Bytes) -> int:
    """The 31-bit value of WINDOW_UPDATE, or the error code of RST_STREAM."""
    if len(payload) != 4:
        raise ProtocolError("a WINDOW_UPDATE or RST_STREAM payload is 4 octets")
    return int(_U32.unpack_from(payload)[0]) & MAX_WINDOW


def rst_stream(stream: int, code: int) -> bytes:
    return head(4, RST_STREAM, 0, stream) + _U32.pack(code)


def ping_ack(payload: bytes) -> bytes:
    return head(8, PING, ACK, 0) + payload


def goaway(last_stream: int, code: int) -> bytes:
    return head(8, GOAWAY, 0, 0) + _GOAWAY.pack(last_stream, code)


def unpad(flags: int, payload: Bytes, *, priority: bool = False) -> Bytes:
    """A DATA or HEADERS payload without its padding (and a HEADERS' priority fields)."""
    start, end = 0, len(payload)
    if flags & PADDED:
        if not payload:
            raise ProtocolError("a padded frame without its pad length")
        start, end = 1, end - payload[0]
    if priority and flags & PRIORITY_FLAG:
        start += 5
    if end < start:
        raise ProtocolError("padding longer than the frame")
    return payload if (start, end) == (0, len(payload)) else payload[start:end]


# -- header blocks --------------------------------------------------------------------------


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    """HPACK's prefix integer (RFC 7541 §5.1) with ``first``'s high bits set."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(raw: bytes) -> bytes:
    return _integer(len(raw), 7, 0) + raw  # no Huffman: the relay's blocks stay cheap to make


def literal_field(name: str, value: str | bytes) -> bytes:
    """One header as "literal without indexing, new name" (RFC 7541 §6.2.2): the receiver's
    dynamic table is left as it was."""
    raw = value.encode("latin-1") if isinstance(value, str) else value
    return b"\x00" + _string(name.encode("latin-1")) + _string(raw)  # as decoded: any byte


STATUS_200 = b"\x88"  # ``:status: 200``, static table entry 8


def block(fields: Iterable[tuple[str, str | bytes]]) -> bytes:
    """A header block of ``fields`` that changes no HPACK state (``:status: 200`` by its
    static index, everything else literal)."""
    return b"".join(
        STATUS_200
        if (name, value) in ((":status", "200"), (":status", b"200"))
        else literal_field(name, value)
        for name, value in fields
    )


def _skip_integer(data: bytes, i: int, prefix_bits: int) -> tuple[int, int]:
    """The prefix integer at ``data[i]`` and the index after it."""
    value = data[i] & ((1 << prefix_bits) - 1)
    i += 1
    if value == (1 << prefix_bits) - 1:
        shift = 0
        while True:
            if i >= len(data):
                return -1, len(data) + 1
            b = data[i]
            i += 1
            value += (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
    return value, i


def state_neutral(data: bytes) -> bool:
    """Whether decoding a header block leaves the HPACK state as it was: only indexed fields
    and literals without (or never) indexing (RFC 7541 §6.1, §6.2.2-3). The same bytes then
    decode the same way until a block that does change the state."""
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        if b & 0x80:  # indexed field
            _, i = _skip_integer(data, i, 7)
            continue
        if b & 0xE0:  # incremental indexing (01) or a table size update (001)
            return False
        index, i = _skip_integer(data, i, 4)  # literal, not indexed (0000 or 0001)
        for _ in range(1 if index else 2):  # the value, and the name when not indexed
            if i >= n:
                return False
            length, i = _skip_integer(data, i, 7)
            i += length
    return i == n


def headers_frames(stream: int, data: bytes, *, end_stream: bool) -> bytes:
    """HEADERS (and CONTINUATION where the block is larger than a frame) carrying ``data``."""
    flags = END_STREAM if end_stream else 0
    if len(data) <= FRAME_MAX:
        return head(len(data), HEADERS, flags | END_HEADERS, stream) + data
    parts = [data[i : i + FRAME_MAX] for i in range(0, len(data), FRAME_MAX)]
    out = [head(len(parts[0]), HEADERS, flags, stream), parts[0]]
    for i, part in enumerate(parts[1:], 1):
        last = END_HEADERS if i == len(parts) - 1 else 0
        out += [head(len(part), CONTINUATION, last, stream), part]
    return b"".join(out)


# -- gRPC over HTTP/2 ----------------------------------------------------------------------

# grpc-status numbers by name (the gRPC status codes).
GRPC_CODES = {
    "OK": 0,
    "CANCELLED": 1,
    "UNKNOWN": 2,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}
GRPC_NAMES = {number: name for name, number in GRPC_CODES.items()}

# What a client makes of a stream reset (gRPC's HTTP/2 error mapping).
RESET_CODES = {NO_ERROR: "INTERNAL", REFUSED_STREAM: "UNAVAILABLE", CANCEL: "CANCELLED"}
RESET_CODES[ENHANCE_YOUR_CALM] = "RESOURCE_EXHAUSTED"


def grpc_status_block(code: str, message: str, *, headers_sent: bool) -> bytes:
    """The block that ends a call with status ``code``: trailers only (``:status`` and
    content type included) unless response headers went out already."""
    fields: list[tuple[str, str | bytes]] = []
    if not headers_sent:
        fields += [(":status", "200"), ("content-type", "application/grpc")]
    fields.append(("grpc-status", str(GRPC_CODES[code])))
    if message:
        # gRPC's percent-encoding of grpc-message: printable ASCII but '%' as is.
        fields.append(("grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")))
    return block(fields)


_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_grpc_timeout(value: str) -> float | None:
    """Seconds of a ``grpc-timeout`` header (``100m``, ``5S``…); None when malformed."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not (digits.isascii() and digits.isdigit()) or len(digits) > 8:
        return None
    return int(digits) * unit
