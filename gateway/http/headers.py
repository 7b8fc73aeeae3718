"""Which header fields cross the proxy (RFC 9110 §7.6.1): pure functions on the raw
``(name, value)`` byte pairs the parsers produce.

Hop-by-hop fields, and every field the ``Connection`` header names, belong to one
connection and are dropped in both directions; ``Authorization`` is dropped towards a
replica because service tokens never leave the gateway. Everything else — notably
``Content-Type``, ``Content-Encoding`` and Triton's ``Inference-Header-Content-Length`` —
passes byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

HOP_BY_HOP_BYTES: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"transfer-encoding",
        b"upgrade",
        b"trailer",  # we never forward trailers, so never announce them
    }
)

# Set by the proxy itself: Host names the replica, Content-Length follows the body as it
# is actually sent, Expect is answered by the gateway, not relayed.
REQUEST_REPLACED: Final = frozenset({b"host", b"content-length", b"expect"})
PREDICT_DROPPED: Final = REQUEST_REPLACED | {b"authorization"}
FORWARDED: Final = frozenset({b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"})


def connection_listed_bytes(values: Iterable[bytes]) -> frozenset[bytes]:
    """Field names listed in ``Connection`` header values (lower-case)."""
    names: set[bytes] = set()
    for value in values:
        for token in value.split(b","):
            token = token.strip().lower()
            if token:
                names.add(token)
    return frozenset(names)


# Connection values as clients send them, parsed once: the options, lower-case. Neither
# names a field that is not already dropped (keep-alive) unless a field named "close" came.
_PLAIN_OPTIONS: Final = {
    value: connection_listed_bytes((value,))
    for value in (b"close", b"Close", b"keep-alive", b"Keep-Alive")
}
_NOT_FIELDS: Final = HOP_BY_HOP_BYTES | {b"close"}  # listed, they leave nothing to remove


def forward_request_headers(
    headers: list[tuple[bytes, bytes]],
    *,
    drop: frozenset[bytes],
    peer: str | None,
) -> list[bytes]:
    """Request fields for the upstream as ready-to-join header lines: without hop-by-hop
    fields, ``Proxy-*``, the fields ``Connection`` names and ``drop``; with
    ``X-Forwarded-For`` extended by ``peer`` and ``X-Forwarded-Proto``/``-Host`` set unless
    the client sent them. ``headers`` names are lower-case (as :mod:`gateway.http.server`
    stores them)."""
    out: list[bytes] = []
    xff: bytes | None = None
    host: bytes | None = None
    listed: frozenset[bytes] | None = None
    proto = fhost = close_field = False
    for name, value in headers:
        if name in _SPECIAL:
            if name == b"host":
                host = value
            elif name == b"connection":
                options = _PLAIN_OPTIONS.get(value) or connection_listed_bytes((value,))
                listed = options if listed is None else listed | options
            elif name == b"x-forwarded-for":
                xff = value if xff is None else xff + b", " + value
                continue
            elif name == b"x-forwarded-proto":
                proto = True
            elif name == b"x-forwarded-host":
                fhost = True
            elif name == b"close":
                close_field = True
            if name in HOP_BY_HOP_BYTES or name in drop:
                continue
        elif name in drop or name[:6] == b"proxy-":
            continue
        out += (name, b": ", value, b"\r\n")
    # The fields kept are rebuilt only when Connection names one that may be among them
    # (Connection: close alone, as every client without keep-alive sends, names none).
    if listed and (close_field or not listed <= _NOT_FIELDS):
        out = without_fields(out, listed)
    if peer:
        p = peer.encode("latin-1")
        xff = p if xff is None else xff + b", " + p
    if xff is not None:
        out += (b"x-forwarded-for: ", xff, b"\r\n")
    if not proto:
        out.append(b"x-forwarded-proto: http\r\n")
    if host is not None and not fhost:
        out += (b"x-forwarded-host: ", host, b"\r\n")
    return out


def predict_upstream_headers(
    headers: list[tuple[bytes, bytes]], peer: str | None, length: int | None
) -> list[bytes]:
    """A predict call's header lines as they go to the replica: ``headers`` forwarded
    (:func:`forward_request_headers`, the token dropped) and its body's ``length``."""
    out = forward_request_headers(headers, drop=PREDICT_DROPPED, peer=peer)
    if length:
        out.append(b"content-length: %d\r\n" % length)
    return out


def without_fields(parts: list[bytes], listed: frozenset[bytes]) -> list[bytes]:
    """``parts`` (name, ": ", value, CRLF quadruples) minus the fields ``listed`` (lower-case),
    as a ``Connection`` header asks of a proxy."""
    out: list[bytes] = []
    for i in range(0, len(parts), 4):
        if parts[i].lower() not in listed:
            out += parts[i : i + 4]
    return out


_SPECIAL: Final = HOP_BY_HOP_BYTES | FORWARDED | {b"host", b"close"}
