"""Large request bodies read into the gateway's own buffers (gateway.bodyread): no copy in
user space, the buffer used again only once no view of it is alive."""

from __future__ import annotations

import asyncio
import random

from gateway.bodyread import BUFFERED_FROM, READ_BYTES, BodyReader, Buffers
from gateway.listener import HttpServer
from gateway.server import Request
from tests.gateway.test_server import FakeTransport


def test_a_buffer_is_taken_again_only_once_no_view_of_it_is_alive() -> None:
    buffers = Buffers()
    first = buffers.take()
    view = memoryview(first)[:10]  # e.g. a write still queued on the replica's transport
    second = buffers.take()
    assert second is not first and len(second) == READ_BYTES
    view.release()
    assert buffers.take() is first  # the oldest free one


def test_a_large_body_is_read_into_buffers_and_passed_on_as_views() -> None:
    rng = random.Random(7)
    body = rng.randbytes(3 * READ_BYTES + 12_345)
    head = b"POST /a HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
    after = b"GET /b HTTP/1.1\r\n\r\n"

    async def scenario() -> tuple[list[object], list[bytes], list[str]]:
        chunks: list[object] = []
        copies: list[bytes] = []
        targets: list[str] = []

        class Sink:
            def write_body(self, data: bytes | memoryview) -> None:
                chunks.append(type(data))
                copies.append(bytes(data))  # (and lets go of the view)

        def handle(request: Request) -> None:
            targets.append(request.target)
            if request.target == "/a":
                request.body.pipe_to(Sink())
            request.conn.write_response(200, [], b"ok")

        server = HttpServer(handle)  # type: ignore[arg-type]
        conn = server.protocol()
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        transport.set_protocol(conn)
        stream = head + body + after
        transport.deliver(stream[:1000])  # the head and the start of the body
        reader = transport.protocol
        assert isinstance(reader, BodyReader)  # the rest is large
        assert conn.body_left == len(body) - (1000 - len(head)) >= BUFFERED_FROM
        transport.deliver(stream[1000:])  # the rest, and the next request, in one read
        await asyncio.sleep(0)
        # The reader stays (no change of protocol per request); the next head was read
        # into its small buffer and parsed by the connection.
        assert transport.protocol is reader
        return chunks, copies, targets

    chunks, copies, targets = asyncio.run(scenario())
    assert b"".join(copies) == body
    assert chunks[0] is bytes and set(chunks[1:]) == {memoryview}  # past the head: views
    assert len(chunks) == 1 + 4  # reads of at most one buffer each
    assert targets == ["/a", "/b"]
