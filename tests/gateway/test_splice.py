"""The rest of a large request body moved from the client's socket to the replica's
(``gateway/http/splice.py``), relayed through a buffer (the default) or spliced (opt-in), through
a gateway on real sockets: the bytes arrive exact and in order, a pipelined request behind
the body is still read by the transport, a replica that reads slowly holds the client back,
and a client or replica that leaves mid-body leaves nothing open behind it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from gateway.http import splice
from gateway.http.splice import AVAILABLE
from testing.waiting import wait_until
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import LOOPS, Gateway, LoopThread, post_head, route, table

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="splice(2) is Linux's")


@pytest.fixture(scope="module", params=LOOPS)
def lt(request: pytest.FixtureRequest) -> Iterator[LoopThread]:
    """Each test on asyncio's loop and on uvloop's, the gateway's own (their transports
    differ: uvloop keeps a view of what it could not write whole, asyncio copies it)."""
    loop_thread = LoopThread(LOOPS[request.param])
    yield loop_thread
    loop_thread.close()


BODY = 1_000_000


@dataclass
class Replica:
    """A raw HTTP/1.1 upstream: answers each request with the sha256 and length of the body
    it read. ``slow``: reads 64 KiB at a time with pauses, through a small window (the gateway's
    side fills up);
    ``early``: answers 413 and closes as soon as the head is in."""

    slow: bool = False
    early: bool = False
    bodies: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None

    async def start(self) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        if self.slow:  # a small window (set before listening: TCP agrees on it at connect)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        self.server = await asyncio.start_server(self.serve, sock=sock)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                if self.early:
                    writer.write(b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    writer.close()
                    return
                body = b""
                while len(body) < length:
                    if self.slow:
                        await asyncio.sleep(0.005)
                    body += await reader.readexactly(
                        min(65536 if self.slow else 1 << 20, length - len(body))
                    )
                self.bodies.append(body)
                answer = b"%s %d" % (hashlib.sha256(body).hexdigest().encode(), len(body))
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
def replica(lt: LoopThread) -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []

    def make(*, slow: bool = False, early: bool = False) -> Replica:
        r = Replica(slow=slow, early=early)
        lt.run(r.start())
        started.append(r)
        return r

    yield make
    for r in started:
        lt.run(r.stop())


@dataclass
class Calls:
    """The gateway's moves (it runs in this process): body bytes read out of client sockets
    by ``os.splice`` or by a relay's reads, and how often the replica's socket had no room
    for either."""

    spliced: int = 0
    relayed: int = 0
    full: int = 0

    @property
    def read(self) -> int:
        return self.spliced + self.relayed


@pytest.fixture
def splices(monkeypatch: pytest.MonkeyPatch) -> Calls:
    calls = Calls()
    real_splice, real_read, real_write = os.splice, splice._readinto, splice._write

    def splicing(src: int, dst: int, count: int, *args: object, **kw: int) -> int:
        into_socket = stat.S_ISFIFO(os.fstat(src).st_mode)  # from the pipe
        try:
            n = real_splice(src, dst, count, *args, **kw)  # type: ignore[arg-type]
        except BlockingIOError:
            calls.full += into_socket
            raise
        if not into_socket:
            calls.spliced += n
        return n

    def reading(fd: int, buffer: memoryview) -> int:
        n = real_read(fd, buffer)
        calls.relayed += max(n, 0)
        return n

    def writing(fd: int, data: memoryview) -> int:
        n = real_write(fd, data)
        calls.full += n < 0
        return n

    monkeypatch.setattr(os, "splice", splicing)
    monkeypatch.setattr(splice, "_readinto", reading)
    monkeypatch.setattr(splice, "_write", writing)
    return calls


MODES = {"relay": {}, "splice": {"splice_min_bytes": 65_536}}  # the gateway's settings


def read_answers(s: socket.socket, n: int, timeout: float = 20.0) -> list[tuple[int, bytes]]:
    """``n`` responses with a Content-Length: (status, body) each."""
    s.settimeout(timeout)
    buf, out = b"", list[tuple[int, bytes]]()
    while len(out) < n:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            lines = buf[:end].split(b"\r\n")
            length = next(
                int(v)
                for k, _, v in (x.partition(b":") for x in lines[1:])
                if k.lower() == b"content-length"
            )
            if len(buf) >= end + 4 + length:
                out.append((int(lines[0].split()[1]), buf[end + 4 : end + 4 + length]))
                buf = buf[end + 4 + length :]
                continue
        chunk = s.recv(1 << 20)
        assert chunk, f"closed after {len(out)} answers"
        buf += chunk
    return out


def open_fds(kind: str) -> set[str]:
    """Descriptors of ``kind`` ("socket", "pipe") open in this process, as the kernel names
    them (``"socket:[inode]"``: a number reused for a new one names it differently)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if link.startswith(kind + ":"):
            found.add(link)
    return found


def sockets() -> set[str]:
    """Sockets open in this process (the connections' duplicates among them). Compared as
    sets: one an earlier test left to its loop may close while a test runs."""
    return open_fds("socket")


def pipes() -> int:
    """Pipes open in this process but not kept by the gateway for its next splice (the
    splice's own, and nothing else here, are pipes)."""
    kept = {os.readlink(f"/proc/self/fd/{r}") for r, _, _ in splice._pipes}  # both ends' name
    return len(open_fds("pipe") - kept)


def expect(body: bytes) -> bytes:
    return b"%s %d" % (hashlib.sha256(body).hexdigest().encode(), len(body))


def warm(gw: Gateway) -> None:
    """One small call, so that a replica connection is idle for the next (the fast path)."""
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        s.sendall(post_head(3) + b"abc")
        assert read_answers(s, 1) == [(200, expect(b"abc"))]


def start(make_gateway: GatewayFactory, r: Replica, mode: str, **kw: float) -> Gateway:
    """A gateway relaying (its default) or splicing bodies from 64 KiB on, with ``kw``."""
    settings = MODES[mode] | kw
    return make_gateway(table(route([r.url])), max_body_bytes=64 * 1024 * 1024, **settings)


def moved(calls: Calls, mode: str) -> int:
    """Body bytes moved the way ``mode`` says, and none the other way."""
    assert (calls.spliced if mode == "relay" else calls.relayed) == 0, calls
    return calls.read


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pieces", [1, 7])
def test_a_large_body_is_moved_exact_and_a_pipelined_request_behind_it_still_read(
    make_gateway: GatewayFactory,
    replica: Callable[..., Replica],
    splices: Calls,
    pieces: int,
    mode: str,
) -> None:
    r = replica()
    gw = start(make_gateway, r, mode)
    rng = random.Random(pieces)
    big, small = rng.randbytes(BODY), b"after the big one"
    warm(gw)
    before = pipes()
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        stream = post_head(len(big)) + big + post_head(len(small)) + small
        cut = sorted(rng.sample(range(1, len(stream)), pieces - 1))
        for a, b in zip([0, *cut], [*cut, len(stream)], strict=True):
            s.sendall(stream[a:b])
            time.sleep(0.01)
        answers = read_answers(s, 2)
    assert answers == [(200, expect(big)), (200, expect(small))]
    assert r.bodies == [b"abc", big, small]
    # All but what the first read held (with the head) went by splice or relay.
    assert moved(splices, mode) >= BODY - 256 * 1024, splices
    wait_until(lambda: pipes() == before, 10, what="the splice's pipe closed or kept")


@pytest.mark.parametrize("settings", [{}, {"splice_min_bytes": 0}], ids=["default", "zero"])
def test_by_default_or_at_zero_a_body_is_relayed_not_spliced(
    make_gateway: GatewayFactory,
    replica: Callable[..., Replica],
    splices: Calls,
    settings: dict[str, int],
) -> None:
    r = replica()
    gw = make_gateway(table(route([r.url])), max_body_bytes=64 * 1024 * 1024, **settings)
    big = random.Random(0).randbytes(BODY)
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        s.sendall(post_head(len(big)) + big)
        assert read_answers(s, 1) == [(200, expect(big))]
    assert splices.spliced == 0 and splices.relayed > 0, splices


@pytest.mark.parametrize("mode", MODES)
def test_a_replica_that_reads_slowly_holds_the_move_back_and_gets_every_byte(
    make_gateway: GatewayFactory, replica: Callable[..., Replica], splices: Calls, mode: str
) -> None:
    r = replica(slow=True)
    gw = start(make_gateway, r, mode)
    big = random.Random(1).randbytes(8 * BODY)
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        s.sendall(post_head(len(big)))
        s.sendall(big)
        assert read_answers(s, 1, timeout=60) == [(200, expect(big))]
    assert r.bodies == [big]
    # Held back: the replica's socket filled (a move into it found no room) and drained.
    assert moved(splices, mode) >= 7 * BODY and splices.full > 0, splices


@pytest.mark.parametrize("mode", MODES)
def test_a_client_leaving_mid_body_closes_the_move_and_the_replica_connection(
    make_gateway: GatewayFactory, replica: Callable[..., Replica], splices: Calls, mode: str
) -> None:
    r = replica()
    gw = start(make_gateway, r, mode)
    before, open_sockets = pipes(), sockets()
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        s.sendall(post_head(BODY) + b"x" * 200_000)
        time.sleep(0.1)
        s.sendall(b"y" * 200_000)
        wait_until(lambda: moved(splices, mode) > 0, 10, what="the body being moved")
    wait_until(lambda: pipes() == before, 10, what="the splice's pipe closed after the client left")
    # The client's and the replica's connections, and their duplicates, all closed.
    wait_until(lambda: sockets() <= open_sockets, 10, what="no socket left open")
    assert r.bodies == []  # the replica never got a whole body
    warm(gw)  # the gateway serves on


@pytest.mark.parametrize("mode", MODES)
def test_a_replica_answering_before_the_body_is_in_is_relayed_and_nothing_leaks(
    make_gateway: GatewayFactory, replica: Callable[..., Replica], splices: Calls, mode: str
) -> None:
    r = replica(early=True)
    gw = start(make_gateway, r, mode)
    before = pipes()
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        s.sendall(post_head(BODY) + b"x" * 100_000)
        time.sleep(0.2)
        with contextlib.suppress(OSError):  # the gateway may have closed after answering
            s.sendall(b"x" * (BODY - 100_000))
        status, _ = read_answers(s, 1)[0]
    assert status == 413
    wait_until(
        lambda: pipes() == before, 10, what="the splice's pipe closed after the early answer"
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_body_that_stalls_mid_move_is_timed_out_like_any_other(
    make_gateway: GatewayFactory, replica: Callable[..., Replica], splices: Calls, mode: str
) -> None:
    r = replica()
    gw = start(make_gateway, r, mode, body_timeout_s=0.5)
    warm(gw)
    before = pipes()
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        s.sendall(post_head(BODY) + b"x" * 100_000)
        time.sleep(0.1)
        s.sendall(b"x" * 300_000)  # moved, then nothing more comes
        wait_until(lambda: moved(splices, mode) > 0, 10, what="the body being moved")
        status, body = read_answers(s, 1)[0]
    assert status == 408, body
    wait_until(lambda: pipes() == before, 10, what="the splice's pipe closed after the timeout")


@pytest.mark.parametrize("mode", MODES)
def test_heads_repeated_or_not_around_moved_bodies_are_all_read_right(
    make_gateway: GatewayFactory, replica: Callable[..., Replica], splices: Calls, mode: str
) -> None:
    """A moved body whose head the parser read leaves it waiting for that body (a new one
    reads on); one whose head was a repeat leaves it between messages (it reads on)."""
    r = replica()
    gw = start(make_gateway, r, mode)
    warm(gw)
    rng = random.Random(11)
    bodies = [
        rng.randbytes(BODY),  # parsed
        rng.randbytes(BODY),  # the same head: not parsed
        b"another head",  # parsed, by the parser the repeat left
        rng.randbytes(BODY),  # parsed again (another head came between)
        rng.randbytes(BODY),  # a repeat
        rng.randbytes(BODY - 1),  # another length: parsed
        b"x",
    ]
    answers = []
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        for body in bodies:
            s.sendall(post_head(len(body)) + body)
            answers += read_answers(s, 1)
    assert answers == [(200, expect(b)) for b in bodies]
    assert r.bodies == [b"abc", *bodies]
    assert moved(splices, mode) >= 5 * (BODY - 256 * 1024), splices
