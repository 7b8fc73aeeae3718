"""The head a client gets for a replica's response head (pure): when it is the replica's
own bytes, and otherwise what framing is decided."""

from __future__ import annotations

import pytest

from gateway.http.upstream import ResponseHead, response_head_bytes

RAW = b"HTTP/1.1 200 OK\r\nContent-Type: a/b\r\nContent-Length: 5\r\n\r\n"


def head(status: int = 200, raw: bytes = RAW, verbatim: bool = True) -> ResponseHead:
    made = ResponseHead(status, b"Content-Type: a/b\r\n", 5, False, True, verbatim=verbatim)
    made.raw = raw
    return made


@pytest.mark.parametrize(
    ("given", "http11", "keep_alive", "head_only", "relayed"),
    [
        (head(), True, True, False, True),
        (head(verbatim=False), True, True, False, False),  # a field to drop
        (head(raw=b""), True, True, False, False),  # its bytes not known yet
        (head(raw=RAW.replace(b"OK", b"Fine")), True, True, False, False),  # another phrase
        (head(204, RAW.replace(b"200 OK", b"204 No Content")), True, True, False, False),
        (head(), False, True, False, False),  # HTTP/1.0 client
        (head(), True, False, False, False),  # the client closes: "connection: close"
        (head(), True, True, True, False),  # HEAD: the length of a body it does not get
    ],
)
def test_the_replicas_head_is_relayed_as_it_came_only_when_it_says_the_same(
    given: ResponseHead, http11: bool, keep_alive: bool, head_only: bool, relayed: bool
) -> None:
    out, chunked, kept = response_head_bytes(
        given, client_http11=http11, keep_alive=keep_alive, head_only=head_only
    )
    assert (out is given.raw) is relayed
    assert not chunked and kept == keep_alive
    if not relayed:
        assert out.endswith(b"\r\n\r\n") and out.startswith(b"HTTP/1.1 %d " % given.status)
