"""A connection's writes on its socket (gateway.http.writes.Sender), on asyncio's loop and on
uvloop's: in order behind what the transport holds, whole when the socket takes part, and
never on a closed transport's descriptor."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from gateway.http import splice
from gateway.http.writes import SEND, SENDV, Sender, send_nowait, sendv_nowait
from tests.gateway.harness import LOOPS


def run(loop: str, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(scenario())


async def connected(sndbuf: int = 0) -> tuple[asyncio.Transport, socket.socket]:
    """A transport on one end of a loopback TCP connection, and the other end (blocking, not
    read until the test reads it). ``sndbuf``: small buffers both ways, so the socket fills."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        ours = socket.socket()
        if sndbuf:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        ours.connect(server.getsockname())
        peer, _ = server.accept()
    if sndbuf:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * sndbuf)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    return transport, peer


async def read_exactly(peer: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = await asyncio.to_thread(peer.recv, n - len(got))
        assert chunk, bytes(got[-100:])
        got += chunk
    return bytes(got)


@pytest.mark.parametrize("loop", LOOPS)
def test_what_the_socket_does_not_take_goes_through_the_transport_in_order(loop: str) -> None:
    async def scenario() -> None:
        transport, peer = await connected(sndbuf=4096)
        sender = Sender(transport)
        # More than both buffers hold: the socket takes part of the first, the transport
        # keeps the rest of it and everything after it.
        messages = [bytes([65 + i]) * 60_000 for i in range(3)]
        for m in [*messages, b"last"]:
            sender.send(m)
        assert transport.get_write_buffer_size() > 0
        sent = b"".join(messages) + b"last"
        assert await read_exactly(peer, len(sent)) == sent
        transport.close()
        peer.close()

    run(loop, scenario)


class HoldingTransport:
    """A transport that holds unsent data, over a real socket: what is written on the
    socket, and what is handed to the transport, are told apart."""

    def __init__(self, sock: socket.socket, held: int) -> None:
        self.sock, self.held, self.written = sock, held, bytearray()

    def get_extra_info(self, name: str) -> object:
        return self.sock if name == "socket" else None

    def get_write_buffer_size(self) -> int:
        return self.held

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.written += data


@pytest.mark.parametrize(("held", "on_socket"), [(0, b"next"), (1, b"")])
def test_a_write_goes_on_the_socket_only_when_the_transport_holds_nothing(
    held: int, on_socket: bytes
) -> None:
    ours, peer = socket.socketpair()
    with ours, peer:
        ours.setblocking(False)
        peer.setblocking(False)
        transport = HoldingTransport(ours, held)
        Sender(transport).send(b"next")  # type: ignore[arg-type]
        got = b""
        with contextlib.suppress(BlockingIOError):
            got = peer.recv(16)
        assert got == on_socket
        assert bytes(transport.written) == b"next"[len(on_socket) :]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_small_write_and_a_pair_arrive_whole(loop: str) -> None:
    async def scenario() -> None:
        transport, peer = await connected()
        sender = Sender(transport)
        sender.send(b"one")
        sender.pair(b"head:", memoryview(b"body"))
        sender.parts([b"a", b"b", b"c"])
        sender.pair(b"H", b"x" * 70_000)  # large: the transport's vectored write
        assert await read_exactly(peer, 3 + 9 + 3 + 70_001) == (
            b"one" + b"head:body" + b"abc" + b"H" + b"x" * 70_000
        )
        transport.close()
        peer.close()

    run(loop, scenario)


@pytest.mark.parametrize("loop", LOOPS)
def test_nothing_is_written_on_the_descriptor_of_a_closed_transport(loop: str) -> None:
    async def scenario() -> None:
        transport, peer = await connected()
        sender = Sender(transport)
        fd = transport.get_extra_info("socket").fileno()
        transport.close()
        await asyncio.sleep(0.05)  # closed by now, on either loop
        # The lowest free descriptor is the one just closed: the next socket gets it.
        other, other_peer = socket.socketpair()
        try:
            assert fd in (other.fileno(), other_peer.fileno())
            with contextlib.suppress(RuntimeError):  # uvloop's transport refuses it
                sender.send(b"late")
            for s in (other, other_peer):
                s.setblocking(False)
                with pytest.raises(BlockingIOError):
                    s.recv(16)
        finally:
            other.close()
            other_peer.close()
            peer.close()

    run(loop, scenario)


@pytest.mark.parametrize("send", {send_nowait, SEND}, ids=lambda f: f.__module__)
def test_a_send_says_how_much_the_socket_left_and_never_raises_for_the_socket(
    send: Callable[[int, bytes | memoryview], int],
) -> None:
    ours, peer = socket.socketpair()
    with ours, peer:
        ours.setblocking(False)
        assert send(ours.fileno(), b"abc") == 0
        assert send(ours.fileno(), memoryview(b"xdefx")[1:4]) == 0
        assert peer.recv(16) == b"abcdef"
        taken = 0
        while (left := send(ours.fileno(), b"z" * 65_536)) < 65_536:  # until full: no error
            taken += 65_536 - left
        assert taken > 0 and left == 65_536
        peer.close()
        assert send(ours.fileno(), b"late") == 4  # broken (EPIPE), and no SIGPIPE
    assert send(ours.fileno(), b"x") == 1  # -1: closed (EBADF)


@pytest.mark.parametrize("sendv", {sendv_nowait, SENDV}, ids=lambda f: f.__module__)
def test_a_vectored_send_sends_head_then_body_and_says_what_it_left(
    sendv: Callable[[int, bytes, bytes | memoryview], int],
) -> None:
    ours, peer = socket.socketpair()
    with ours, peer:
        ours.setblocking(False)
        assert sendv(ours.fileno(), b"head:", memoryview(b"xbodyx")[1:5]) == 0
        assert sendv(ours.fileno(), b"", b"!") == 0
        assert peer.recv(16) == b"head:body!"
        left = 0
        while not left:  # until the socket takes only part, or none
            left = sendv(ours.fileno(), b"h" * 1000, b"b" * 60_000)
        assert 0 < left <= 61_000
        peer.close()
        assert sendv(ours.fileno(), b"late", b"r") == 5  # broken (EPIPE), and no SIGPIPE
    assert sendv(ours.fileno(), b"x", b"y") == 2  # closed (EBADF)


@pytest.mark.parametrize("takes", [0, 3, 5, 7, 9])
def test_a_pair_the_socket_takes_part_of_goes_on_whole_and_in_order(takes: int) -> None:
    """Whatever a direct send left of head and body, the transport gets exactly the rest."""
    ours, peer = socket.socketpair()
    with ours, peer:
        transport = HoldingTransport(ours, 0)
        sender = Sender(transport)  # type: ignore[arg-type]
        sender._sendv = lambda fd, head, body: len(head) + len(body) - takes
        sender.pair(b"head:", memoryview(b"body"))
        assert bytes(transport.written) == b"head:body"[takes:]


def test_a_build_with_c_sends_without_releasing_the_gil() -> None:
    import gateway.http.writes

    built = list((Path(gateway.http.writes.__file__).parent).glob("_nowait.*.so"))
    assert (SEND is not send_nowait) == bool(built)


@pytest.mark.parametrize(
    ("readinto", "write"),
    [(splice._readinto_py, splice._write_py), (splice._readinto, splice._write)],
    ids=["python", "built"],
)
def test_a_relay_reads_and_writes_answer_not_now_with_minus_one_and_raise_on_errors(
    readinto: Callable[[int, memoryview], int], write: Callable[[int, memoryview], int]
) -> None:
    ours, peer = socket.socketpair()
    with ours, peer:
        ours.setblocking(False)
        buffer = memoryview(bytearray(8))
        assert readinto(ours.fileno(), buffer) == -1  # nothing yet
        peer.sendall(b"abc")
        assert readinto(ours.fileno(), buffer) == 3 and bytes(buffer[:3]) == b"abc"
        taken = 0
        while (n := write(ours.fileno(), memoryview(b"z" * 65_536))) > 0:
            taken += n
        assert taken > 0 and n == -1  # full
        peer.shutdown(socket.SHUT_WR)
        assert readinto(ours.fileno(), buffer) == 0  # the peer's end
        peer.close()
        with pytest.raises(OSError):  # broken (EPIPE or ECONNRESET), and no SIGPIPE
            while write(ours.fileno(), memoryview(b"late")) != 0:
                pass
