"""Heads repeated byte for byte skip the parsers (:class:`gateway.http.server.Head`,
:class:`gateway.http.upstream.ResponseHead`): what a client and a replica see must not change.

The replica here is a raw HTTP/1.1 server whose answer head is the same for every call and
whose body is the SHA-256 of the request body, so a body taken from the wrong request, or a
head kept past a change, shows."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from gateway.http.server import HttpConnection
from gateway.http.upstream import UpstreamConnection
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import SERVICE, TOKEN, Gateway, LoopThread, post_head, route, table

P = f"/api/predict/{SERVICE}/v2/models/m/infer"
ANSWER_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 32\r\n\r\n"
)


@dataclass
class Replica:
    """Answers each request with ``answer_head`` + sha256(body); keeps the heads it got.
    ``split`` sends the answer's head and body in two writes, a moment apart."""

    split: bool = False
    answer_head: bytes = ANSWER_HEAD
    heads: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    port: int = 0
    server: asyncio.Server | None = None

    def protocol(self) -> asyncio.Protocol:
        replica = self

        class Conn(asyncio.Protocol):
            def __init__(self) -> None:
                self.buf = b""
                self.transport: asyncio.Transport | None = None

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport  # type: ignore[assignment]

            def data_received(self, data: bytes) -> None:
                self.buf += data
                while (end := self.buf.find(b"\r\n\r\n")) != -1:
                    head = self.buf[: end + 4]
                    length = 0
                    for line in head.split(b"\r\n"):
                        name, _, value = line.partition(b":")
                        if name.lower() == b"content-length":
                            length = int(value)
                    if len(self.buf) < end + 4 + length:
                        return
                    body = self.buf[end + 4 : end + 4 + length]
                    self.buf = self.buf[end + 4 + length :]
                    replica.heads.append(head)
                    replica.bodies.append(body)
                    asyncio.get_running_loop().create_task(self.answer(body))

            async def answer(self, body: bytes) -> None:
                assert self.transport is not None
                digest = hashlib.sha256(body).digest()
                if replica.split:
                    self.transport.write(replica.answer_head)
                    await asyncio.sleep(0.02)
                    self.transport.write(digest)
                else:
                    self.transport.write(replica.answer_head + digest)

        return Conn()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(self.protocol, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
def replicas(lt: LoopThread) -> Iterator[list[Replica]]:
    made = [Replica(), Replica(), Replica(split=True)]
    for r in made:
        lt.run(r.start())
    yield made
    for r in made:
        lt.run(r.stop())


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many heads each side's parser completed (for connections made after this)."""
    counts = {"request": 0, "response": 0}
    for side, cls in (("request", HttpConnection), ("response", UpstreamConnection)):
        original = cls.on_headers_complete

        def counted(self: object, _original: object = original, _side: str = side) -> None:
            counts[_side] += 1
            _original(self)  # type: ignore[operator]

        monkeypatch.setattr(cls, "on_headers_complete", counted)
    return counts


def connect(gw: Gateway) -> http.client.HTTPConnection:
    """One keep-alive client connection to ``gw``: its calls repeat their heads."""
    return http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)


def post(conn: http.client.HTTPConnection, body: bytes, token: str = TOKEN) -> tuple[int, bytes]:
    conn.request("POST", P, body=body, headers={"Authorization": token, "X-Same": "1"})
    resp = conn.getresponse()
    return resp.status, resp.read()


def test_a_repeated_head_carries_each_requests_own_body_both_ways(
    make_gateway: GatewayFactory,
    replicas: list[Replica],
    parses: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[bytes] = []
    original = UpstreamConnection.data_received

    def data_received(self: UpstreamConnection, data: bytes) -> None:
        reads.append(data)
        original(self, data)

    # (the event loop binds a protocol's data_received when a connection is made)
    monkeypatch.setattr(UpstreamConnection, "data_received", data_received)
    replica = replicas[0]
    gw = make_gateway(table(route([replica.url])))
    conn = connect(gw)
    bodies = [os.urandom(300) for _ in range(20)]
    for body in bodies:
        assert post(conn, body) == (200, hashlib.sha256(body).digest())
    conn.close()
    assert replica.bodies == bodies
    assert len(set(replica.heads)) == 1  # the same upstream head every time
    assert replica.heads[0].startswith(b"POST /v2/models/m/infer HTTP/1.1\r\n")
    assert b"authorization" not in replica.heads[0].lower()
    # One head parsed on each side; the other 19 were recognised.
    assert parses == {"request": 1, "response": 1}
    # Each answer came in one read (the 19 recognised ones skipped the parser).
    assert len(reads) == len(bodies)
    assert all(r.endswith(hashlib.sha256(b).digest()) for r, b in zip(reads, bodies, strict=True))


def test_a_head_that_differs_is_parsed_and_checked_again(
    make_gateway: GatewayFactory, replicas: list[Replica], parses: dict[str, int]
) -> None:
    replica = replicas[0]
    gw = make_gateway(table(route([replica.url])))
    conn = connect(gw)
    body = os.urandom(100)
    wrong = TOKEN[:-1] + ("y" if TOKEN[-1] != "y" else "z")  # same length, one byte off
    assert post(conn, body)[0] == 200
    assert post(conn, body)[0] == 200
    assert post(conn, body, token=wrong)[0] == 401
    assert post(conn, body)[0] == 200
    assert post(conn, os.urandom(101))[0] == 200  # another Content-Length
    conn.close()
    assert len(replica.bodies) == 4
    assert parses["request"] == 4  # first, wrong token, first again, new length


def test_a_rotated_token_refuses_a_repeated_head(
    make_gateway: GatewayFactory, replicas: list[Replica]
) -> None:
    replica = replicas[0]
    gw: Gateway = make_gateway(table(route([replica.url])))
    conn = connect(gw)
    body = os.urandom(64)
    assert post(conn, body)[0] == 200
    assert post(conn, body)[0] == 200
    gw.publish(table(route([replica.url], token="rotated-" + "z" * 24), version=2))
    assert post(conn, body)[0] == 401
    conn.close()


@pytest.mark.parametrize("change", ["moved", "removed", "renamed"])
def test_a_table_change_reaches_a_connection_that_repeats_its_head(
    make_gateway: GatewayFactory, replicas: list[Replica], change: str
) -> None:
    """A repeated head keeps the service it resolved to only until the next table."""
    a, b = replicas[0], replicas[1]
    gw: Gateway = make_gateway(table(route([a.url])))
    conn = connect(gw)
    body = os.urandom(64)
    assert post(conn, body)[0] == 200
    assert post(conn, body)[0] == 200
    if change == "moved":  # the service's replica is now b alone
        gw.publish(table(route([b.url]), version=2))
        assert post(conn, body)[0] == 200
        assert (len(a.bodies), len(b.bodies)) == (2, 1)
    else:  # the name no longer routes: gone, or now another service's
        routes = [route([b.url], service="other")] if change == "renamed" else []
        gw.publish(table(*routes, version=2))
        assert post(conn, body)[0] == 404
        assert (len(a.bodies), len(b.bodies)) == (2, 0)
    conn.close()


def raw_answers(gw: Gateway, n: int, body: bytes, version: str = "1.1") -> list[bytes]:
    """The bytes of ``n`` answers to the same request on one connection."""
    request = (
        f"POST {P} HTTP/{version}\r\nHost: gw\r\nAuthorization: {TOKEN}\r\n"
        f"Connection: keep-alive\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    answers = []
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        for _ in range(n):
            s.sendall(request)
            got = b""
            while b"\r\n\r\n" not in got or len(got) < got.index(b"\r\n\r\n") + 4 + 32:
                chunk = s.recv(65536)
                assert chunk, got
                got += chunk
            answers.append(got)
    return answers


@pytest.mark.parametrize(
    ("answer_head", "verbatim"),
    [
        (ANSWER_HEAD, True),
        # Mixed case, Content-Length first: still the replica's bytes.
        (b"HTTP/1.1 200 OK\r\ncontent-LENGTH: 32\r\nX-Model: m\r\nContent-Type: a/b\r\n\r\n", True),
        # A field the client must not get (hop-by-hop, or a proxy's own): never relayed.
        (b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nContent-Length: 32\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nProxy-Thing: 1\r\nContent-Length: 32\r\n\r\n", False),
        # A reason phrase the gateway would not send: its own status line instead.
        (b"HTTP/1.1 200 Fine\r\nContent-Length: 32\r\n\r\n", False),
    ],
)
def test_a_repeated_answer_is_relayed_as_the_replica_sent_it_when_nothing_in_it_changes(
    make_gateway: GatewayFactory, lt: LoopThread, answer_head: bytes, verbatim: bool
) -> None:
    replica = Replica(answer_head=answer_head)
    lt.run(replica.start())
    try:
        gw = make_gateway(table(route([replica.url])))
        body = os.urandom(40)
        digest = hashlib.sha256(body).digest()
        first, *repeats = raw_answers(gw, 3, body)
        # The first is parsed and made again; the repeats, the same head each time.
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(digest)
        assert b"content-length: 32\r\n" in first
        for answer in repeats:
            assert (answer == answer_head + digest) is verbatim, answer
            assert answer.endswith(digest)
            assert b"Keep-Alive" not in answer and b"Proxy-Thing" not in answer
        # An HTTP/1.0 client never gets the replica's head (its framing is decided anew).
        for answer in raw_answers(gw, 3, body, version="1.0")[1:]:
            assert answer != answer_head + digest and answer.endswith(digest)
    finally:
        lt.run(replica.stop())


def test_each_replica_gets_its_own_host_from_one_repeated_head(
    make_gateway: GatewayFactory, replicas: list[Replica]
) -> None:
    a, b = replicas[0], replicas[1]
    gw = make_gateway(table(route([a.url, b.url])))
    conn = connect(gw)
    bodies = [os.urandom(50) for _ in range(10)]
    for body in bodies:
        assert post(conn, body) == (200, hashlib.sha256(body).digest())
    conn.close()
    assert a.bodies and b.bodies and sorted(a.bodies + b.bodies) == sorted(bodies)
    for r in (a, b):
        assert {h.split(b"\r\n")[1] for h in r.heads} == {f"host: 127.0.0.1:{r.port}".encode()}


def test_pipelined_and_split_messages_still_parse(
    make_gateway: GatewayFactory, replicas: list[Replica], parses: dict[str, int]
) -> None:
    """Repeated heads that do not come as one whole message per read: several in one read,
    a body split across reads, an answer whose body comes after its head."""
    gw = make_gateway(table(route([replicas[2].url])))  # the replica that splits answers
    bodies = [os.urandom(40) for _ in range(3)]
    head = post_head(40)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(head + bodies[0])  # kept as the connection's last head
        got = read_answers(s, 1)
        s.sendall(b"".join(head + body for body in bodies))  # three in one read
        got += read_answers(s, 3)
        s.sendall(head + bodies[1][:10])
        s.sendall(bodies[1][10:])
        got += read_answers(s, 1)
    expected = [bodies[0], *bodies, bodies[1]]
    assert got == [hashlib.sha256(b).digest() for b in expected]
    # Each answer's head came alone: after the first, recognised, its body passed after it.
    assert parses["response"] == 1
    assert parses["request"] <= 4  # the first, the three in one read; the split one not


def test_large_bodies_behind_a_repeated_head_pass_whole(
    make_gateway: GatewayFactory, replicas: list[Replica], parses: dict[str, int]
) -> None:
    """Past a read's head, a large body part is passed on as a view of the read, not a
    copy: whole in one read, or the start of a body still coming."""
    replica = replicas[0]
    gw = make_gateway(table(route([replica.url])))
    size = 100_000
    bodies = [os.urandom(size) for _ in range(4)]
    head = post_head(size)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        got = []
        for i, body in enumerate(bodies):
            if i < 2:
                s.sendall(head + body)
            else:
                s.sendall(head + body[:70_000])
                time.sleep(0.05)  # the call is on its way before the rest comes
                s.sendall(body[70_000:])
            got += read_answers(s, 1)
    assert got == [hashlib.sha256(b).digest() for b in bodies]
    assert replica.bodies == bodies
    assert parses["request"] == 1  # the first head only


def read_answers(s: socket.socket, n: int) -> list[bytes]:
    """``n`` answers of 32 bytes each, in order."""
    buf, out = b"", list[bytes]()
    while len(out) < n:
        while (end := buf.find(b"\r\n\r\n")) == -1 or len(buf) < end + 4 + 32:
            chunk = s.recv(65536)
            assert chunk, "connection closed"
            buf += chunk
        assert buf.startswith(b"HTTP/1.1 200 OK\r\n"), buf[:100]
        out.append(buf[end + 4 : end + 36])
        buf = buf[end + 36 :]
    return out


def test_a_head_whose_large_body_is_spliced_is_still_recognised_next_time(
    make_gateway: GatewayFactory, replicas: list[Replica], parses: dict[str, int]
) -> None:
    """The rest of a 1 MB body is spliced (``gateway/http/splice.py``), often whole in the read
    that parsed its head: that head is kept all the same, and the next calls skip the
    parser."""
    replica = replicas[0]
    gw = make_gateway(
        table(route([replica.url])), max_body_bytes=8 * 1024 * 1024, splice_min_bytes=65_536
    )
    size = 1_000_000
    bodies = [os.urandom(size) for _ in range(3)]
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(post_head(3) + b"abc")  # a replica connection idle for what follows
        got = read_answers(s, 1)
        for body in bodies:
            s.sendall(post_head(size) + body)
            got += read_answers(s, 1)
    assert got == [hashlib.sha256(b).digest() for b in [b"abc", *bodies]]
    assert replica.bodies == [b"abc", *bodies]
    assert parses["request"] == 2  # the small call's head, and the large calls' first only
