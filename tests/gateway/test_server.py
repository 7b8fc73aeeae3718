"""The connection protocol driven directly, with a fake transport, for orderings that a
real socket produces only by chance."""

from __future__ import annotations

import asyncio
import gc
import random
import socket
from collections.abc import Callable
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.http.forwarding import read_body
from gateway.http.listener import HttpServer
from gateway.http.server import SHARED_HEAD_BYTES, SHARED_HEADS, HttpConnection, Request
from gateway.http.writes import Chunk
from gateway.route_source import StaticRouteSource
from gateway.settings import GatewaySettings
from testing.waiting import wait_until, wait_until_async
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import SERVICE, TOKEN, Echo, post_head, raw_exchange, route, table


class FakeTransport:
    def __init__(self, peer: str = "127.0.0.1") -> None:
        self.out: list[bytes] = []
        self.closing = False
        self.peer = peer

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0  # (no socket: every write comes here)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.peer, 5555) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closing = True


def test_client_gone_before_its_handler_ran_returns_its_queue_place() -> None:
    """Request parsed, then the connection lost in the same loop turn: the coroutine
    that holds the service's queue place must still run its cleanup."""

    async def scenario() -> int:
        # A replica nobody listens on: the request takes the coroutine path (connect).
        gw = Gateway(
            GatewaySettings(connect_timeout_ms=200),
            StaticRouteSource(table(route(["http://127.0.0.1:9"], max_queue_size=1))),
        )
        await gw.start()
        await gw.wait_for_routes(5)
        server = HttpServer(gw.handle)
        for _ in range(3):
            conn = server.protocol()
            conn.connection_made(FakeTransport())  # type: ignore[arg-type]
            conn.data_received(
                f"GET /api/predict/{SERVICE}/v2 HTTP/1.1\r\nAuthorization: {TOKEN}\r\n\r\n".encode()
            )
            conn.connection_lost(None)
        entry = gw.routes.get(SERVICE)
        assert entry is not None
        await wait_until_async(lambda: entry.in_flight.count == 0, 10)
        await gw.close()
        return entry.in_flight.count

    assert asyncio.run(scenario()) == 0


class ListSink:
    def __init__(self) -> None:
        self.data: list[bytes] = []

    def write_body(self, data: Chunk) -> None:
        self.data.append(bytes(data))

    def splice_target(self) -> tuple[int, Callable[[], int]] | None:
        return None  # a list, not a socket: every byte passes through write_body


def pipelined_messages(rng: random.Random) -> tuple[bytes, list[tuple[str, bytes]]]:
    """Four requests back to back: a streamed body of known length, a chunked one with odd
    chunk sizes, a small one dispatched whole, none; with the bodies each should deliver."""
    big = rng.randbytes(300_001)
    pieces = [rng.randbytes(n) for n in (1, 17, 4096, 65537, 3)]
    small = b"0123456789"
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    stream = (
        b"POST /a HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(big), big)
        + b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked
        + b"POST /c HTTP/1.1\r\nContent-Length: 10\r\n\r\n"
        + small
        + b"GET /d HTTP/1.1\r\n\r\n"
    )
    return stream, [("/a", big), ("/b", b"".join(pieces)), ("/c", small), ("/d", b"")]


@pytest.mark.parametrize("seed", range(6))
def test_bodies_split_at_any_boundary_arrive_byte_exact_and_in_order(seed: int) -> None:
    """Reads cut anywhere (inside heads, chunk sizes, bodies; a body's end and the next head
    in one read) deliver every body byte for byte, piped or buffered."""
    rng = random.Random(seed)
    stream, expected = pipelined_messages(rng)

    async def scenario() -> list[tuple[str, bytes]]:
        got: list[tuple[str, bytes]] = []

        async def handle(request: Request) -> None:
            if request.target == "/a":  # streamed to a sink as it arrives
                sink = ListSink()
                request.body.pipe_to(sink)
                await wait_until_async(lambda: request.body.complete, 10)
                body = b"".join(sink.data)
            else:
                body = await read_body(request.body, 1 << 20)
            got.append((request.target, body))
            request.conn.write_response(200, [], b"ok")

        server = HttpServer(handle, buffer_bytes=1024)
        conn = server.protocol()
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        at = 0
        while at < len(stream):
            step = rng.choice([1, 2, 3, 5, 7, 100, 1000, 65536, 300_000])
            conn.data_received(stream[at : at + step])
            at += step
            await asyncio.sleep(0)  # let handlers run between reads
        await wait_until_async(lambda: len(got) == len(expected), 10)
        assert b"".join(transport.out).count(b"HTTP/1.1 200 OK") == len(expected)
        return got

    assert asyncio.run(scenario()) == expected


def test_the_sweeper_runs_only_while_connections_are_open() -> None:
    async def scenario() -> None:
        server = HttpServer(lambda request: None, keepalive_s=0.2)
        await server.listen("127.0.0.1", 0)
        assert server._sweeper is None  # listening alone costs no timer
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await wait_until_async(lambda: server._sweeper is not None, 5)
        assert await reader.read() == b""  # idle past keepalive_s: closed by the sweeper
        writer.close()
        await wait_until_async(lambda: server._sweeper is None, 5)
        await server.close(0)

    asyncio.run(scenario())


def test_a_head_after_a_body_that_spanned_reads_is_remembered_as_itself() -> None:
    """A body whose end came in its own read (or a repeated head's body) completes the
    message without the parser: that request must not be taken for the next read's. Else
    the next head's bytes are kept as the old request's, and a later read equal to them is
    answered as the old request while its body is parsed as requests (smuggling)."""

    async def scenario() -> list[tuple[str, int | None]]:
        seen: list[tuple[str, int | None]] = []

        def handle(request: Request) -> None:
            seen.append((request.target, request.content_length))
            request.conn.write_response(200, [], b"ok")
            request.finish()

        conn = HttpServer(handle, buffer_bytes=1 << 20).protocol()
        conn.connection_made(FakeTransport())  # type: ignore[arg-type]
        inner = b"GET /smuggled HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
        second = b"y" * 100 + inner
        h1 = b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n"
        h2 = b"POST /b HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(second)
        for part in (h1 + b"x" * 10, b"x" * 90):  # /a's body ends in a read of its own
            conn.data_received(part)
        for cut in (100, 50):  # /b twice, each in two reads
            conn.data_received(h2 + second[:cut])
            conn.data_received(second[cut:])
        return seen

    assert asyncio.run(scenario()) == [("/a", 100), ("/b", 154), ("/b", 154)]


def test_a_closed_connection_is_freed_without_the_collector(
    make_gateway: GatewayFactory, echo: Echo
) -> None:
    """Nothing a connection leaves refers back to it (its parser's callbacks, its requests):
    closed, it is freed at once rather than left in cycles for the collector's full passes,
    which walk the whole heap with every call waiting (startup/heap.py)."""
    gw = make_gateway(table(route([echo.url])))
    call = post_head(2).replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n") + b"{}"
    assert raw_exchange(gw.port, call).startswith(b"HTTP/1.1 200")  # the replica's connection

    def in_memory() -> int:  # connections not freed yet (other tests' open ones too)
        return sum(type(o) is HttpConnection for o in gc.get_objects())

    gc.collect()
    before = in_memory()
    gc.disable()  # what a cycle would keep stays
    try:
        for _ in range(20):
            assert raw_exchange(gw.port, call).startswith(b"HTTP/1.1 200")
        wait_until(lambda: in_memory() <= before, timeout=5)
    finally:
        gc.enable()


HEAD = b"POST /m HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 2\r\n\r\n"


def answering(seen: list[Request]) -> HttpServer:
    def handle(request: Request) -> None:
        seen.append(request)
        request.conn.write_response(200, [], b"ok")
        request.finish()

    return HttpServer(handle)


def new_connection(
    server: HttpServer, peer: str = "127.0.0.1"
) -> tuple[HttpConnection, FakeTransport]:
    transport = FakeTransport(peer)
    conn = server.protocol()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def test_a_head_repeated_on_new_connections_is_parsed_once() -> None:
    """A client opening a connection per call sends the same head each time: the next
    connection from its address takes the head parsed on the first (and the upstream head
    made from it, whose X-Forwarded-For names that address); each call is still answered
    on its own connection and, as asked, closed."""

    async def scenario() -> None:
        seen: list[Request] = []
        server = answering(seen)
        peers = ["127.0.0.1", "127.0.0.1", "10.0.0.2", "127.0.0.1"]
        transports = []
        for peer in peers:
            conn, transport = new_connection(server, peer)
            conn.data_received(HEAD + b"{}")
            transports.append(transport)
        heads = [r.head for r in seen]
        assert heads[0] is heads[1] is heads[3]  # same address: parsed once
        assert heads[2] is not heads[0]  # another address: its own (X-Forwarded-For)
        assert [r.peer for r in seen] == peers
        for transport in transports:
            out = b"".join(transport.out)
            assert out.startswith(b"HTTP/1.1 200 OK") and b"connection: close\r\n" in out
            assert transport.closing

    asyncio.run(scenario())


def test_a_shared_head_with_more_behind_it_is_parsed() -> None:
    """A known head followed by more than its body (a pipelined request) is not taken
    whole: the parser reads the read, and both requests are answered in order."""

    async def scenario() -> list[tuple[str, bytes]]:
        seen: list[Request] = []
        server = answering(seen)
        kept = HEAD.replace(b"connection: close\r\n", b"")
        new_connection(server)[0].data_received(kept + b"{}")
        conn, transport = new_connection(server)
        second = b"POST /n HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n[]"
        conn.data_received(kept + b"{}" + second)
        await wait_until_async(lambda: len(seen) == 3, 5)
        assert b"".join(transport.out).count(b"HTTP/1.1 200 OK") == 2
        return [(r.target, bytes(r.body.take())) for r in seen[1:]]

    assert asyncio.run(scenario()) == [("/m", b"{}"), ("/n", b"[]")]


def test_the_heads_a_listener_keeps_are_bounded() -> None:
    """In number (it starts over) and in size (a long head is parsed on each connection)."""

    async def scenario() -> tuple[int, int]:
        seen: list[Request] = []
        server = answering(seen)
        for n in range(SHARED_HEADS + 50):  # a new head each time (its target)
            conn, _ = new_connection(server)
            conn.data_received(HEAD.replace(b"/m", b"/m%d" % n) + b"{}")
        assert len(seen) == SHARED_HEADS + 50
        kept = len(server.heads)
        server.heads.clear()
        long = HEAD.replace(b"host: x", b"host: " + b"x" * SHARED_HEAD_BYTES)
        for _ in range(2):
            new_connection(server)[0].data_received(long + b"{}")
        assert seen[-1].head is not seen[-2].head and seen[-1].target == "/m"
        return kept, len(server.heads)

    kept, long_kept = asyncio.run(scenario())
    assert 0 < kept <= SHARED_HEADS
    assert long_kept == 0


def test_a_call_on_a_shared_head_is_not_cut_off_as_a_slow_head() -> None:
    """The head came whole (its parse skipped, which would have said so): a call that
    takes longer than the head timeout is answered, not closed as a slow head."""

    async def scenario() -> list[bytes]:
        async def handle(request: Request) -> None:
            await asyncio.sleep(0.6)  # three times the head timeout, the sweeper ticking
            request.conn.write_response(200, [], b"ok")

        server = HttpServer(handle, head_timeout_s=0.2)
        await server.listen("127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        answers = []
        for _ in range(2):  # the second connection's head is the first's
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(HEAD + b"{}")
            answers.append(await reader.read())
            writer.close()
        await server.close(0)
        return answers

    for answer in asyncio.run(scenario()):
        assert answer.startswith(b"HTTP/1.1 200 OK"), answer


def test_new_connections_from_two_addresses_each_reach_the_replica_as_themselves(
    make_gateway: GatewayFactory, echo: Echo
) -> None:
    """The same head, each call on a new connection, from two loopback addresses: every
    call reaches the replica with its own address in X-Forwarded-For, and the token is
    still checked on each (a shared head is a parse saved, not a check)."""
    gw = make_gateway(table(route([echo.url])))
    call = post_head(2).replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n") + b"{}"
    wrong = call.replace(TOKEN.encode(), b"x" * len(TOKEN))

    def from_address(address: str, data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", gw.port), source_address=(address, 0)) as s:
            s.sendall(data)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return out

    addresses = ["127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2"]
    for address in addresses:
        assert from_address(address, call).startswith(b"HTTP/1.1 200")
        assert from_address(address, wrong).startswith(b"HTTP/1.1 401")
    assert [s.header("X-Forwarded-For") for s in echo.seen] == addresses
