"""The client-facing HTTP/1.1 server: one :class:`asyncio.Protocol` per connection, parsed
by ``httptools`` (llhttp).

Why not aiohttp.web or an ASGI server: the gateway shares a core with Triton and its CPU
per request is throughput Triton loses (the figures: docs/performance.md). So this module
does only what a proxy needs, with as few Python calls per request as possible:

- ``handler(request)`` is called synchronously once per request — for a request with a
  small body (up to ``buffer_bytes``) or none, once the whole message is in, so the common
  case needs no task and no future; for a larger or chunked body, as soon as the head is
  in, so the body can be streamed. The handler either answers by callbacks and later calls
  :meth:`Request.finish`, or returns a coroutine that the connection runs as a task (the
  request finishes when it returns).
- A request body not consumed at dispatch is held in :class:`Body`; past ``BUFFER_HIGH``
  (or ``buffer_bytes`` if larger) the client socket stops being read, so a client never
  pushes more than a bounded amount into gateway memory. :meth:`Body.pipe_to` streams it
  into an upstream transport.
- Response bytes go straight to the transport; :meth:`HttpConnection.pause_writing`
  tells the current producer (an upstream exchange) to stop reading its replica until the
  client drains.
- A client that disconnects aborts its request: the task is cancelled, or the
  :class:`Abortable` registered with :meth:`Request.on_abort` is told (an upstream exchange
  closes its replica connection).

Pipelined requests are answered strictly in order; reading pauses while one is queued.
Upgrades (WebSocket, CONNECT) are refused with 501 by the handler (``request.upgrade``).
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from http import HTTPStatus
from time import monotonic
from typing import Any, Final, cast
from typing import Protocol as TypingProtocol

import httptools
from mypy_extensions import mypyc_attr

from gateway.http.derived import Derived
from gateway.http.http1 import CRLF, ReadPausable, request_line_refusal, status_line
from gateway.http.splice import AVAILABLE as SPLICE_AVAILABLE
from gateway.http.splice import RELAY_MIN, BodyMove, BodyRelay, BodySplice
from gateway.http.writes import Chunk, Sender

log = logging.getLogger(__name__)

# Final: compiled, a plain module constant is a dict lookup per use.
BUFFER_HIGH: Final = 256 * 1024  # body bytes held before the client is paused (at least)
# The body bytes of a read past its head are passed on as a view, not copied, from this size.
VIEW_BODY_BYTES: Final = 65_536
MAX_HEAD_BYTES: Final = 64 * 1024  # request line + header fields (431 past it)
# Heads a listener keeps for its new connections (see HttpConnection._shared_head); at
# this many it starts over, so clients sending ever-new heads cost no more than a miss.
# Longer heads are not kept (a client's is a few hundred bytes): at most 2 MiB in all.
SHARED_HEADS: Final = 256
SHARED_HEAD_BYTES: Final = 8192
MAX_HEADER_FIELDS: Final = 100  # Apache's LimitRequestFields: past it 431 (replicas refuse more)
DISCARD_MAX: Final = 4 * 1024 * 1024  # unread body drained to keep a connection; past it, close
LINGER_S: Final = 2.0  # how long a refused upload is drained before the connection is closed
# A closed connection's parser: the parser it had calls back its bound methods (a cycle).
_CLOSED_PARSER: Final = httptools.HttpRequestParser(object())


class Producer(TypingProtocol):
    """What streams a response into a connection (an upstream exchange)."""

    def pause_producing(self) -> None: ...

    def resume_producing(self) -> None: ...


class BodySink(TypingProtocol):
    """Where :meth:`Body.pipe_to` sends request-body bytes (an upstream connection)."""

    def write_body(self, data: Chunk) -> None: ...

    def splice_target(self) -> tuple[int, Callable[[], int]] | None:
        """The socket the rest of a body may be spliced into, and how many bytes the sink
        still holds for it (they go first); None: not a socket (see :mod:`gateway.http.splice`)."""
        ...


class Listener(TypingProtocol):
    """What accepted a connection (:class:`gateway.http.listener.HttpServer`)."""

    loop: asyncio.AbstractEventLoop
    buffer_bytes: int
    splice_min: int
    connections: set[HttpConnection]
    handler: RequestHandler
    # Heads its connections parsed, by peer address and bytes (HttpConnection._shared_head)
    heads: dict[tuple[str | None, bytes], Head]
    sweeping: bool  # whether its sweeper runs (closing idle and slow connections)

    def sweep(self) -> None: ...

    def run_handler(
        self, conn: HttpConnection, req: Request, coro: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]: ...


class Abortable(TypingProtocol):
    """What a callback-driven handler registers to hear that its client left first: the
    object itself, not a bound method of it (one per call to make and free)."""

    def abort(self) -> None: ...


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    """The client closed its connection before its request body was complete."""


# One instance kept for reuse when freed (compiled: no allocation for most calls' bodies).
@mypyc_attr(free_list_len=1)
class Body:
    """A request body as it arrives from the client."""

    __slots__ = (
        "_conn",
        "_discard",
        "_first",
        "_limit",
        "_more",
        "_sink",
        "_waiter",
        "buffered",
        "complete",
        "failed",
        "received",
    )

    def __init__(self, conn: HttpConnection, whole: Chunk | None = None) -> None:
        """``whole``: all of the body, already read (its message is complete)."""
        self._conn = conn
        # What is buffered: the first chunk alone, a list only from the second (most
        # bodies come whole: no list to make and free per call).
        self._first: Chunk | None = whole if whole else None
        self._more: list[Chunk] | None = None
        self._sink: BodySink | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._discard = False
        self._limit = 0
        self.buffered = self.received = len(whole) if whole is not None else 0
        self.complete = whole is not None
        self.failed = False

    # -- fed by the connection ----------------------------------------------------------

    def feed(self, data: Chunk) -> None:
        self.received += len(data)
        if self._sink is not None:
            self._sink.write_body(data)
            return
        if self._discard:
            return
        if self._first is None:
            self._first = data
        elif self._more is None:
            self._more = [data]
        else:
            self._more.append(data)
        self.buffered += len(data)
        if self._limit:
            if self.buffered > self._limit:
                self._wake()
        elif self.buffered > self._conn.pause_bytes:
            self._conn.pause_reading()

    def finish(self) -> None:
        self.complete = True
        self._wake()

    def fail(self) -> None:
        self.failed = True
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    # -- used by the handler ------------------------------------------------------------

    def take(self) -> Chunk:
        """What is buffered (the whole body once the message is complete)."""
        first, more = self._first, self._more
        self._first = self._more = None
        self.buffered = 0
        if first is None:
            return b""
        if more is None:
            return first
        return b"".join([first, *more])

    def chunks(self) -> list[Chunk]:
        """What is buffered, left in place (the proxy checks a signed call's body before
        it goes on)."""
        first = self._first
        if first is None:
            return []
        more = self._more
        return [first] if more is None else [first, *more]

    def expect(self, limit: int) -> None:
        """Read the rest of the body (asking a client that waits for "100 Continue"), and
        wake :meth:`waiter` as soon as more than ``limit`` bytes are buffered."""
        self._conn.send_continue()
        self._limit = limit
        self._conn.resume_reading()

    def waiter(self) -> asyncio.Future[None]:
        """Done when more of the body arrived, the message is complete or the client left
        (see :func:`gateway.http.forwarding.read_body`)."""
        self._waiter = self._conn.loop.create_future()
        return self._waiter

    def pipe_to(self, sink: BodySink) -> None:
        """Send what is buffered and everything still to come to ``sink``."""
        self._conn.send_continue()
        first, more = self._first, self._more
        self._first = self._more = None
        self.buffered = 0
        if first is not None:
            sink.write_body(first)
        for chunk in more or ():
            sink.write_body(chunk)
        self._sink = sink
        self._conn.resume_reading()

    @property
    def sink(self) -> BodySink | None:
        return self._sink

    def detach(self) -> None:
        """What is still to come goes nowhere (its sink's exchange ended)."""
        self._sink = None
        self._conn.stop_splice()

    def discard(self) -> None:
        self.detach()
        self._discard = True
        self._first = self._more = None
        self.buffered = 0


class Head:
    """A parsed request head (header names lower-case bytes). A connection keeps its last
    one with the bytes it was parsed from (``raw``): clients repeat their heads byte for
    byte (same model, tensor shapes and token), and a head equal to the last is not parsed
    again (see :meth:`HttpConnection.data_received`). ``derived`` holds what the router and
    the proxy derive from the head (:mod:`gateway.http.derived`), kept with it."""

    __slots__ = (
        "authorization",
        "content_length",
        "derived",
        "expect_continue",
        "has_body",
        "head_only",
        "headers",
        "hmap",
        "http11",
        "keep_alive",
        "method",
        "raw",
        "target",
        "upgrade",
        "version",
    )

    def __init__(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        hmap: dict[bytes, bytes],
        version: str,
        keep_alive: bool,
        upgrade: bool,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.hmap = hmap  # dict(headers): last value per name, for lookups
        # Read on every call (the token), kept apart: a lookup of a header name compares
        # the bytes of a key the parser made.
        self.authorization = hmap.get(b"authorization")
        self.version = version
        self.http11 = version == "1.1"  # (compared once, not by each call's exchange)
        self.head_only = method == "HEAD"
        self.keep_alive = keep_alive
        self.upgrade = upgrade
        cl = hmap.get(b"content-length")
        self.content_length = int(cl) if cl is not None else None  # llhttp validated it
        self.has_body = (self.content_length or 0) > 0 or b"transfer-encoding" in hmap
        expect = hmap.get(b"expect")
        self.expect_continue = (
            expect is not None and expect.lower() == b"100-continue" and version == "1.1"
        )
        self.raw = b""  # the bytes it was parsed from, once known to be all of them
        self.derived: Derived | None = None  # filled by the router and the proxy

    @property
    def repeatable(self) -> bool:
        """Whether a byte-equal head may skip the parser: an HTTP/1.1 request whose body,
        if any, has a length and is sent without waiting for "100 Continue" (on its own
        connection again only if it keeps it open, ``keep_alive``)."""
        return (
            self.version == "1.1"
            and not self.upgrade
            and not self.expect_continue
            and b"transfer-encoding" not in self.hmap
        )


@mypyc_attr(free_list_len=1)  # as Body
class Request:
    """One request: its head's fields (``keep_alive`` and ``target`` may be changed for this
    request alone) and its body."""

    __slots__ = (
        "_abort",
        "body",
        "conn",
        "content_length",
        "derived",
        "expect_continue",
        "has_body",
        "head",
        "headers",
        "hmap",
        "keep_alive",
        "method",
        "target",
        "upgrade",
        "version",
    )

    def __init__(self, conn: HttpConnection, head: Head, whole: Chunk | None = None) -> None:
        self.conn = conn
        self.head = head
        self.method = head.method
        self.target = head.target  # raw request-target: path and query as sent
        self.headers = head.headers
        self.hmap = head.hmap
        self.version = head.version
        self.keep_alive = head.keep_alive
        self.content_length = head.content_length
        self.has_body = head.has_body
        self.expect_continue = head.expect_continue
        self.upgrade = head.upgrade
        self.body = Body(conn, whole)
        self._abort: Abortable | None = None

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def peer(self) -> str | None:
        return self.conn.peer

    def on_abort(self, aborter: Abortable | None) -> None:
        """Call ``aborter.abort()`` if the client disconnects before :meth:`finish`."""
        self._abort = aborter

    def finish(self) -> None:
        """The response is fully written (callback-driven handlers call this)."""
        self.finish_at(self.conn.time())

    def finish_at(self, now: float) -> None:
        """:meth:`finish`, with the connection's clock already read."""
        self._abort = None
        self.conn.finished(self, now)


Handler = Callable[[Request], Coroutine[Any, Any, None] | None]


class RequestHandler(ABC):
    """What answers a connection's requests: :meth:`handle` answers now (and finishes the
    request), or returns the coroutine that will. A native class, not a callable: compiled,
    a connection calls it directly, where a callable costs a call through the interpreter
    per request."""

    @abstractmethod
    def handle(self, request: Request) -> Coroutine[Any, Any, None] | None:
        """The request's answer now (None), or the coroutine that makes it."""


class CallingHandler(RequestHandler):
    """A plain function as a :class:`RequestHandler`."""

    def __init__(self, handle: Handler) -> None:
        self._handle = handle

    def handle(self, request: Request) -> Coroutine[Any, Any, None] | None:
        return self._handle(request)


def framing_refusal(
    headers: list[tuple[bytes, bytes]], hmap: dict[bytes, bytes]
) -> tuple[int, str] | None:
    """(status, detail) for a head whose framing we cannot relay faithfully, else None.

    llhttp de-chunks a body whose last transfer coding is ``chunked`` and drops the codings
    before it, so ``gzip, chunked`` would reach the replica as a gzip body nobody declared:
    any coding but a single ``chunked`` is 501 (RFC 9112 §6.1). More than one Host field is
    400 (RFC 9112 §3.2). Cheap for the common head: no Transfer-Encoding, no repeated name.
    ``hmap`` is ``dict(headers)``.
    """
    if len(headers) > MAX_HEADER_FIELDS:
        return 431, f"more than {MAX_HEADER_FIELDS} header fields"
    if len(hmap) != len(headers) and sum(name == b"host" for name, _ in headers) > 1:
        return 400, "more than one Host header field"
    if b"transfer-encoding" in hmap:
        codings = [
            coding.strip().lower()
            for name, value in headers
            if name == b"transfer-encoding"
            for coding in value.split(b",")
            if coding.strip()
        ]
        if codings != [b"chunked"]:
            listed = ", ".join(c.decode("latin-1") for c in codings)
            return 501, f"transfer coding not implemented: {listed} (only chunked is)"
    return None


class HttpConnection(ReadPausable):
    """One client connection."""

    def __init__(self, server: Listener) -> None:
        self.server = server
        # Bound once (the listener is not compiled: each would be an attribute lookup).
        self._handler = server.handler
        self.responding = False  # bytes of the active request's response went out
        self.loop = server.loop
        self.time = monotonic  # the proxy's clock, as the upstream pool's (gateway.http.upstream)
        self.buffer_bytes = server.buffer_bytes
        # Bodies dispatched whole must fit before reading pauses, or they never complete.
        self.pause_bytes = max(BUFFER_HIGH, self.buffer_bytes)
        # The rest of a body streamed to a replica is spliced from this many bytes (0: never).
        self.splice_min = server.splice_min if SPLICE_AVAILABLE else 0
        self._splice: BodyMove | None = None
        self._watched = -1
        self.transport: asyncio.Transport | None = None
        self.sender: Sender | None = None  # its writes, once it has a transport
        self.peer: str | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.closed = False
        self.producer: Producer | None = None
        self.last_active = 0.0
        self.writing_paused = False
        self._reading_paused = False
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_size = 0
        self._in_head = True  # a connection that never sends a head is a slow head too
        self.head_started = 0.0  # when the head being read began (slow heads are cut off)
        # The request line held until it is complete (b"": the next bytes begin one; None:
        # not checking, inside a message or behind a pipelined one in the same read).
        self._line: bytes | None = b""
        self.body_at: float | None = None  # last body bytes of the message being parsed
        self._expect_head = True  # next bytes start or continue a request head
        self._parsing: Request | None = None  # request whose message is being parsed
        self._done: Request | None = None  # the last request the parser completed (this read)
        self._last: Head | None = None  # the last head that may be repeated unparsed
        self._shared = server.heads  # the listener's, shared by its connections
        self._parsing_dispatched = False
        self._body_left = 0  # body bytes still to come that bypass the parser
        # Whether the parser saw the head of the body that bypasses it (it then waits for
        # that body, and the next message needs a new parser); a repeated head it never saw.
        self._parser_in_body = False
        self.active: Request | None = None  # request being answered
        self._task: asyncio.Task[None] | None = None
        self._queue: deque[Request] = deque()
        self._continue_sent = False
        self._linger: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.sender = Sender(self.transport)
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) else None
        self.last_active = self.head_started = self.time()
        server = self.server
        server.connections.add(self)
        if not server.sweeping:  # read here: a call to the listener costs a Python frame
            server.sweep()

    def data_received(self, data: bytes) -> None:
        if self._body_left:
            data = self._pass_body(data)
            if not data:
                return
        fresh = self._line == b""  # data begins a request
        last = self._last
        if fresh:
            if last is None:
                if self._shared_head(data):
                    return
            elif data.startswith(last.raw) and len(data) <= len(last.raw) + (
                last.content_length or 0
            ):
                self._repeat(last, data)
                return
        if (
            self._expect_head
            and len(data) + self._head_size > MAX_HEAD_BYTES
            and data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES - self._head_size + 4) == -1
        ):
            self._protocol_error(431, "request header fields too large")
            return
        held = self._line
        if held is not None:
            held = held + data if held else data
            complete, refusal = request_line_refusal(held)
            if refusal is not None:
                self._protocol_error(400, refusal)
                return
            self._line = None if complete else held
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # The request was dispatched with upgrade=True and is refused; nothing after
            # it on this connection is HTTP/1.1 we could parse.
            self.pause_reading()
        except httptools.HttpParserError as e:
            self._protocol_error(400, f"malformed HTTP request: {e}")
            return
        if self._in_head:
            # A head still incomplete after this read: remember how much of it we hold.
            self._head_size += len(data)
            if self._line == b"":
                self._line = None  # it began behind another request in this read
        elif (req := self._parsing) is not None and req.content_length:
            # Mid-way through a body of known length: the rest skips the parser.
            self._body_left = req.content_length - req.body.received
            self._parser_in_body = True
        # The last request the parser completed in this read. (Reset after use, not before
        # the parser runs: compiled, an attribute set to None just before stays None.)
        done, self._done = self._done, None
        if fresh and (req := done or self._parsing) is not None:
            self._remember(req, data)
        self._try_splice()  # after the head is kept: a splice may complete its message

    def _remember(self, req: Request, data: bytes) -> None:
        """Keep the head of ``req`` for :meth:`_repeat` if ``data`` held that head and
        nothing but its body after it: the head's bytes are then ``data`` less the body
        bytes the parser passed on (checked against where the head ends), and equal bytes
        parse the same."""
        head = req.head
        end = len(data) - req.body.received
        if head.repeatable and data.find(b"\r\n\r\n") + 4 == end:
            head.raw = raw = data[:end]
            if head.keep_alive:
                self._last = head
            if end <= SHARED_HEAD_BYTES:
                shared = self._shared
                if len(shared) >= SHARED_HEADS:
                    shared.clear()
                shared[(self.peer, raw)] = head

    def _shared_head(self, data: bytes) -> bool:
        """Take ``data`` as :meth:`_repeat` does if it starts with a head another connection
        of the listener's, from the same address, sent and kept (:meth:`_remember`), with
        nothing but its body after it: a client that opens a connection per call repeats
        its head across connections. Its parse, checks and upstream head (whose
        X-Forwarded-For names the address) are reused as on one connection."""
        end = data.find(b"\r\n\r\n", 0, SHARED_HEAD_BYTES) + 4
        if end < 4:
            return False
        head = self._shared.get((self.peer, data[:end]))
        if head is None or len(data) > end + (head.content_length or 0):
            return False
        self._in_head = False  # its head is in (the parser, which would say so, is skipped)
        if head.keep_alive:
            self._last = head  # this connection's from now on
        self._repeat(head, data)
        return True

    def _repeat(self, head: Head, data: bytes) -> None:
        """A request whose head is byte-equal to one kept, with nothing but (some
        of) its body after it: what the parser's callbacks would do, without them. The
        parser stays between messages; the rest of the body skips it (``_body_left``)."""
        end = len(head.raw)
        body = data[end:] if len(data) - end < VIEW_BODY_BYTES else memoryview(data)[end:]
        if len(data) == end + (head.content_length or 0):
            # The whole message: complete at once, the connection still between messages.
            self._enqueue(Request(self, head, body))
            return
        req = Request(self, head)
        self._expect_head = False
        if body:
            # Held before it is dispatched, so that it goes out with the head in one write.
            req.body.feed(body)
        self._headed(req)
        left = (req.content_length or 0) - req.body.received
        if left:
            self._line = None  # inside a message
            self._body_left = left
            self._try_splice()
        else:
            self._complete()

    def _pass_body(self, data: bytes) -> bytes:
        """Hand the body bytes at the start of ``data`` to the request as they are (llhttp
        would copy each read once more), and return what follows the body. At the body's end
        the message is complete, and the parser is ready for the next one."""
        req = self._parsing
        left = self._body_left
        rest = b""
        if len(data) > left:
            data, rest = data[:left], data[left:]
        self._body_left = left - len(data)
        self.body_at = self.time()
        if req is not None:
            req.body.feed(data)
        if not self._body_left:
            self._parser_between_messages()
            self._complete()
        else:
            self._try_splice()  # its replica's connection may be there now
        return rest

    def _parser_between_messages(self) -> None:
        """At the end of a body that bypassed the parser: a new parser if it saw the head
        (it would take the next bytes for that body), else the one it is: a repeated head's
        message never reached it, and a parser is replaced only when it has seen a head."""
        if self._parser_in_body:
            self._parser_in_body = False
            self.parser = httptools.HttpRequestParser(self)

    # -- the rest of a large body, spliced or relayed (gateway.http.splice) ----------------------

    def _try_splice(self) -> None:
        """Move the rest of the body being read from socket to socket if enough of it is
        still to come and it goes to a replica's socket (else the transport relays it):
        spliced from ``splice_min`` bytes when that is set, else relayed through a buffer
        (no copy into Python's objects) from ``RELAY_MIN``."""
        left = self._body_left
        move: type[BodyMove]
        if self.splice_min and left >= self.splice_min:
            move = BodySplice
        elif left >= RELAY_MIN:
            move = BodyRelay
        else:
            return
        req = self._parsing
        sink = req.body.sink if req is not None else None
        transport = self.transport
        if (
            sink is None
            or transport is None
            or self.closed
            or self._reading_paused
            or self._splice is not None
        ):
            return
        target = sink.splice_target()
        if target is None:
            return
        upstream, queued = target
        try:
            client = self.watched_fd()
            if client < 0:
                return
            splice = move(self.loop, client, upstream, queued, left, self._spliced, self._unspliced)
        except OSError:
            return  # out of descriptors: the transport relays it
        self._splice = splice
        splice.start()
        if not splice.done:  # still to come: the transport reads nothing meanwhile
            transport.pause_reading()

    def _spliced(self, n: int) -> None:
        """``n`` more body bytes left the client's socket (0: reading it again after the
        replica's socket drained: the pause was ours, not the client's)."""
        self.body_at = self.time()
        if n:
            self._body_left -= n
            req = self._parsing
            if req is not None:
                req.body.received += n

    def _unspliced(self, whole: bool) -> None:
        """The splice ended: with the whole body, or reading goes back to the transport."""
        self._splice = None
        if whole:
            self._parser_between_messages()
            self._complete()
        transport = self.transport
        if not self._reading_paused and not self.closed and transport is not None:
            transport.resume_reading()

    def stop_splice(self) -> None:
        if self._splice is not None:
            self._splice.stop()

    def eof_received(self) -> bool | None:
        if self._parsing is not None:
            self._parsing.body.fail()
        return None  # a client that closes its side has left: close ours too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.stop_splice()
        self.close_watched()
        self.server.connections.discard(self)
        if self._linger is not None:
            self._linger.cancel()
        for req in (self._parsing, self.active, *self._queue):
            if req is not None and not req.body.complete:
                req.body.fail()
        active = self.active
        if active is not None and active._abort is not None:
            aborter, active._abort = active._abort, None
            aborter.abort()
        task = self._task
        if task is not None and not task.done():
            # The client left: cancel its upstream request. Via call_soon, so that a task
            # created in this same loop turn takes its first step (entering its try/finally,
            # which returns what it holds) before the cancellation reaches it.
            self.loop.call_soon(task.cancel)
        self._queue.clear()
        # What refers back to this connection goes (its parser's callbacks are its bound
        # methods, its requests name it), so that it is freed once dropped rather than left
        # in cycles to the collector's passes (startup/heap.py says why those must stay
        # rare). Invariant: nothing made per connection refers back to it once closed.
        self.parser = _CLOSED_PARSER
        self.active = self._parsing = self._done = None

    def pause_writing(self) -> None:
        self.writing_paused = True
        if self.producer is not None:
            self.producer.pause_producing()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.producer is not None:
            self.producer.resume_producing()

    # -- httptools callbacks --------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._in_head = True
        self._head_size = 0
        self.head_started = self.time()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._expect_head = False
        headers = self._headers
        hmap = dict(headers)  # last value per name: the request's lookups use it too
        refusal = framing_refusal(headers, hmap)
        if refusal is not None:
            self._protocol_error(*refusal)
            return
        p = self.parser
        head = Head(
            p.get_method().decode("latin-1"),
            self._url.decode("latin-1"),
            headers,
            hmap,
            p.get_http_version(),
            p.should_keep_alive(),
            p.should_upgrade(),
        )
        self._headed(Request(self, head))

    def _headed(self, req: Request) -> None:
        """``req``'s head is in: dispatch it now if its body is to be streamed."""
        if not req.has_body:
            req.body.complete = True
        else:
            self.body_at = self.time()
        self._parsing = req
        # Small bodies are dispatched whole (on_message_complete); others right away.
        cl = req.content_length
        # A client waiting for "100 Continue" sends its body only once the handler asks.
        self._parsing_dispatched = req.has_body and (
            cl is None or cl > self.buffer_bytes or req.expect_continue
        )
        if self._parsing_dispatched:
            self._enqueue(req)

    def on_body(self, body: Chunk) -> None:
        req = self._parsing
        self.body_at = self.time()
        if req is not None:
            req.body.feed(body)

    def on_message_complete(self) -> None:
        # Only the parser's completions are this read's (see data_received): a body that
        # skipped the parser completes by _complete alone.
        if self._parsing is not None:
            self._done = self._parsing
        self._complete()

    def _complete(self) -> None:
        """The message being read is complete."""
        self._expect_head = True
        self._line = b""
        self._head_size = 0
        self.body_at = None
        req = self._parsing
        self._parsing = None
        if req is None:
            return
        req.body.finish()
        if not self._parsing_dispatched:
            self._enqueue(req)
        elif req is self.active and self._task is None and req._abort is None:
            # Its response went out while the rest of its body was being discarded.
            self._next()

    # -- request lifecycle ----------------------------------------------------------------

    def _enqueue(self, req: Request) -> None:
        if self.active is None:
            self._start(req)
        else:
            self._queue.append(req)
            self.pause_reading()  # answer in order; do not read further ahead

    def _start(self, req: Request) -> None:
        self.active = req
        self._continue_sent = False
        try:
            coro = self._handler.handle(req)
        except Exception:
            log.exception("unhandled error in the gateway's request handler")
            self.close()
            return
        if coro is not None:
            self._task = self.server.run_handler(self, req, coro)

    def handled(self, req: Request) -> None:
        """The coroutine the handler returned for ``req`` has returned."""
        self._task = None
        self.finished(req, self.time())

    def finished(self, req: Request, now: float) -> None:
        """The response to ``req`` was fully written at ``now`` (:attr:`time`)."""
        self.producer = None
        self.responding = False
        self.last_active = now
        if self.closed or self.transport is None or req is not self.active:
            return
        if not req.body.complete:
            # Answered before its body was read (a refusal, an early upstream answer).
            cl = req.content_length
            remaining = (cl - req.body.received) if cl is not None else None
            if not req.keep_alive or remaining is None or remaining > DISCARD_MAX:
                self._linger_close()
                return
            req.body.discard()
            self.resume_reading()
            return  # on_message_complete calls _next
        if not req.keep_alive or req.upgrade:
            self.transport.close()
            return
        self._next()

    def _next(self) -> None:
        self.active = None
        if self._queue:
            self._start(self._queue.popleft())
            if not self._queue:
                self.resume_reading()
        elif self._reading_paused:  # (checked here: this runs once per request)
            self.resume_reading()

    def _linger_close(self) -> None:
        """Close after draining what the client is still sending for a while, so it can
        read our answer instead of a reset."""
        if self.active is not None:
            self.active.body.discard()
        self.resume_reading()
        transport = self.transport
        if transport is not None:
            if transport.can_write_eof():
                transport.write_eof()
            self._linger = self.loop.call_later(LINGER_S, transport.close)

    def _protocol_error(self, status: int, detail: str) -> None:
        if self.transport is None or self.closed:
            return
        # Also for a request being relayed (a broken chunk in a streamed body) as long as
        # no byte of its response went out: the client learns why, the replica is aborted.
        if self.active is None or not self.responding:
            body = b'{"type":"about:blank","title":"%b","status":%d,"detail":"%b"}' % (
                HTTPStatus(status).phrase.encode(),
                status,
                detail.replace('"', "'").encode(),
            )
            self.transport.write(
                status_line(status)
                + b"content-type: application/problem+json\r\nconnection: close\r\n"
                + b"content-length: %d\r\n\r\n" % len(body)
                + body
            )
        self.transport.close()

    # -- writing ----------------------------------------------------------------------

    def send_continue(self) -> None:
        req = self.active
        if req is not None and req.expect_continue and not self._continue_sent:
            self._continue_sent = True
            self.body_at = self.time()  # the client starts sending only now
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def write(self, data: bytes) -> None:
        sender = self.sender
        if not self.closed and sender is not None:
            self.responding = True
            sender.send(data)

    def write_parts(self, parts: Sequence[Chunk]) -> None:
        sender = self.sender
        if not self.closed and sender is not None:
            self.responding = True
            sender.parts(parts)

    def write_pair(self, head: bytes, body: Chunk) -> None:
        sender = self.sender
        if not self.closed and sender is not None:
            self.responding = True
            sender.pair(head, body)

    def write_response(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes = b""
    ) -> None:
        """A complete response with a known body in one write."""
        req = self.active
        parts = [status_line(status)]
        for name, value in headers:
            parts += (name, b": ", value, CRLF)
        if req is not None and not req.keep_alive:
            parts.append(b"connection: close\r\n")
        parts += (b"content-length: ", str(len(body)).encode(), b"\r\n\r\n")
        if req is None or req.method != "HEAD":
            parts.append(body)
        self.write(b"".join(parts))

    def pause_reading(self) -> None:
        if self._splice is not None:
            self._reading_paused = True  # honoured when the splice ends
            return
        super().pause_reading()

    def resume_reading(self) -> None:
        if self._splice is not None:
            self._reading_paused = False  # the splice is reading
            return
        if not self._queue:  # else still answering pipelined requests in order
            if self._reading_paused and self.body_at is not None:
                self.body_at = self.time()  # the pause was ours, not the client's
            super().resume_reading()
            self._try_splice()  # e.g. its replica connection is there now

    def body_stalled(self, now: float, timeout_s: float) -> bool:
        """No body bytes for ``timeout_s`` while we were reading them (nginx's
        client_body_timeout: between two reads, not for the whole body)."""
        req = self._parsing
        return (
            self.body_at is not None
            and now - self.body_at > timeout_s
            and not self._reading_paused
            and (self._splice is None or self._splice.reading)
            and not (req is not None and req.expect_continue and not self._continue_sent)
        )

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
