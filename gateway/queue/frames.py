"""EAS's queue items on the wire: the ``streaming.DataFrameProto`` and
``DataFrameListProto`` protobuf messages of ``eas_prediction``'s ``queueservice.proto``,
encoded by hand (four fields; no protobuf runtime in the gateway).

:mod:`gateway.queue.door` answers ``get`` with :func:`encode_list` when the client asks
for ``application/vnd.google.protobuf`` (``QueueClient`` always does), and a watch pushes
one :func:`encode_frame` per WebSocket message. Pure functions.

    message DataFrameProto { uint64 index = 1; map<string, string> tags = 2;
                             bytes data = 3; string message = 4; }
    message DataFrameListProto { repeated DataFrameProto index = 1; }
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

PROTOBUF = b"application/vnd.google.protobuf"


@dataclass(frozen=True)
class Item:
    """One queue entry as the protocol shows it."""

    index: int
    data: bytes
    tags: Mapping[str, str] = field(default_factory=dict)
    message: str = ""


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_frame(item: Item) -> bytes:
    """One ``DataFrameProto``; proto3 leaves out fields at their default value."""
    out = bytearray()
    if item.index:
        out += _varint(1 << 3) + _varint(item.index)
    for key, value in item.tags.items():
        out += _field(2, _field(1, key.encode()) + _field(2, value.encode()))
    if item.data:
        out += _field(3, item.data)
    if item.message:
        out += _field(4, item.message.encode())
    return bytes(out)


def encode_list(items: Iterable[Item]) -> bytes:
    return b"".join(_field(1, encode_frame(item)) for item in items)


def encode_json(items: Iterable[Item]) -> bytes:
    """The same list for a client that does not ask for protobuf (curl): data as text
    where it is UTF-8."""
    out = []
    for item in items:
        try:
            data = item.data.decode()
        except UnicodeDecodeError:
            data = item.data.decode("latin-1")
        out.append({"index": item.index, "tags": dict(item.tags), "data": data})
    return json.dumps(out).encode()
