"""Upstream HTTP/1.1 client: keep-alive connection pools per replica and the exchange that
relays one request/response between a client connection and a replica.

Written on ``asyncio.Protocol`` + ``httptools`` for the same reason as
:mod:`gateway.http.server`: aiohttp's client alone cost several times nginx's whole per-request
CPU in ``bench/gateway.py``, and httpx's pool collapses under concurrency (encode/httpx#3215).
It never adds ``Accept-Encoding``, never decompresses, never follows redirects: the
response's status, end-to-end headers and body bytes reach the client as the replica sent
them (only framing headers are rewritten when the framing changes).

Flow control: the response body is written to the client transport from ``on_body`` as it
arrives; when the client transport's buffer is full, the replica's socket stops being read
(``pause_producing``) until it drains. The request body is written to the replica the same
way, pausing the client's socket while the replica's buffer is full.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from time import monotonic
from typing import Final, cast

import httptools
from mypy_extensions import mypyc_attr

from gateway.http.headers import HOP_BY_HOP_BYTES, connection_listed_bytes, without_fields
from gateway.http.http1 import CRLF, ReadPausable, status_line
from gateway.http.server import Request
from gateway.http.writes import Chunk, Sender
from gateway.http.yielding import cedes_cpu, sched_yield
from gateway.routing.balancer import address

_NO_BODY_STATUS = frozenset({204, 304})
# Response fields the proxy sets itself or that are hop-by-hop (RFC 9110 §7.6.1).
_RESPONSE_SPECIAL: Final = HOP_BY_HOP_BYTES | {b"content-length"}


class UpstreamError(Exception):
    """The replica failed. Only ``kind == "connect"`` means no request byte went out (the
    one case the proxy retries on another replica)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind  # "connect", "timeout" or "broken"


class ResponseHead:
    """A replica's response head: status, framing, and the end-to-end header lines
    (``passthrough``, ready to send) — hop-by-hop ones already removed. A connection keeps
    its last one with the bytes it was parsed from (``raw``), as the client side keeps
    request heads: a replica answering the same call repeats its head byte for byte.
    ``memo`` holds the client-facing heads made from it. ``verbatim``: nothing in it but
    end-to-end fields and one Content-Length, so a client that keeps its connection may
    get it as the replica sent it (see :func:`response_head_bytes`)."""

    __slots__ = (
        "chunked",
        "content_length",
        "keep_alive",
        "last_key",
        "last_made",
        "memo",
        "passthrough",
        "raw",
        "status",
        "verbatim",
    )

    def __init__(
        self,
        status: int,
        passthrough: bytes,
        content_length: int | None,
        chunked: bool,
        keep_alive: bool,
        verbatim: bool = False,
    ) -> None:
        self.status = status
        self.passthrough = passthrough
        self.content_length = content_length
        self.chunked = chunked
        self.keep_alive = keep_alive
        self.verbatim = verbatim
        self.raw = b""
        # By kind of request: an int (HTTP/1.1, keep-alive, HEAD as bits), not a tuple.
        self.memo: dict[int, tuple[bytes, bool, bool]] = {}
        # The last kind asked for and its head, before the dict (a client's calls are alike).
        self.last_key = -1
        self.last_made: tuple[bytes, bool, bool] = (b"", False, False)


# Subclassed by the pool's tests (interpreted), so it allows that; its compiled subclasses
# are the exchanges and shadow calls.
@mypyc_attr(allow_interpreted_subclasses=True)
class Watched(ABC):
    """What the pool's deadline timer checks (an exchange or a shadow call in flight). While
    watched it is linked into the pool's list of them (``watch_prev``/``watch_next``): taken
    in and out per call in a few stores, where a set hashed, grew and left dummies."""

    __slots__ = ("watch_next", "watch_prev", "watching")

    def __init__(self) -> None:
        self.watching = False
        self.watch_prev: Watched | None = None
        self.watch_next: Watched | None = None

    @abstractmethod
    def check_deadline(self, now: float) -> None:
        """The pool's timer: fail if the replica is late."""


class Receiver(Watched):
    """What a connection feeds while it carries one exchange: an :class:`Exchange` (relays to
    a client) or a mirror's shadow call (keeps the answer, see :mod:`gateway.mirroring.mirror`).
    ``status`` is 0 until a final response head arrived. An abstract base class, not a
    protocol: compiled, the connection's calls into it are direct calls, not attribute
    lookups."""

    __slots__ = ("status",)

    def __init__(self) -> None:
        super().__init__()
        self.status = 0

    @abstractmethod
    def on_head(self, head: ResponseHead) -> None:
        """A response head (1xx ones too)."""

    @abstractmethod
    def on_whole(self, head: ResponseHead, data: bytes, end: int) -> None:
        """A repeated final head with all of its body, from one read: ``data``, whose
        first ``end`` bytes are the head (``head.raw``)."""

    @abstractmethod
    def on_body(self, data: bytes) -> None:
        """Response body bytes, as read."""

    @abstractmethod
    def on_complete(self) -> None:
        """The response is complete."""

    @abstractmethod
    def flush(self) -> None:
        """The end of one read from the replica."""

    @abstractmethod
    def connection_lost(self) -> None:
        """The replica's connection ended."""

    @abstractmethod
    def fail(self, error: UpstreamError) -> None:
        """The replica failed."""

    @abstractmethod
    def check_deadline(self, now: float) -> None:
        """The pool's timer: fail if the replica is late."""

    @abstractmethod
    def pause_sending(self) -> None:
        """The replica's socket buffer is full."""

    @abstractmethod
    def resume_sending(self) -> None:
        """It drained."""


class Pool(ABC):
    """Where a connection returns when its exchange ends: :class:`gateway.http.pool.UpstreamPool`.
    An abstract base class, not a protocol (and not the pool itself, which imports this
    module): compiled, the calls of connections and exchanges into it are direct calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop, yield_at: int = 0) -> None:
        self.loop = loop
        # The proxy's clock (its in-flight counts'), so that one reading serves a call's
        # deadline, its end and its connection's idle time (bound once: called per request).
        self.time = monotonic
        self.exchanges = 0  # in flight, on all of its connections
        # With this many in flight, a replica's read passed on gives up the CPU (see
        # gateway.http.yielding); ``cede`` does (an attribute: tests count its calls).
        self.yield_at = yield_at
        self.cede: Callable[[], None] = sched_yield

    @abstractmethod
    def watch(self, ex: Watched) -> None:
        """Check ``ex``'s deadline until :meth:`unwatch`."""

    @abstractmethod
    def unwatch(self, ex: Watched) -> None:
        """Stop checking it."""

    @abstractmethod
    def release(self, conn: UpstreamConnection, now: float) -> None:
        """``conn``'s exchange ended at ``now`` (:attr:`time`): keep it idle for the next,
        or close it."""

    @abstractmethod
    def forget(self, conn: UpstreamConnection) -> None:
        """``conn`` closed."""


def _no_transport() -> bool:
    return True


class UpstreamConnection(ReadPausable):
    """One keep-alive connection to a replica; one exchange at a time."""

    def __init__(self, pool: Pool, key: tuple[str, int]) -> None:
        self.pool = pool
        self.address = address(*key)  # its key in the pool
        self.transport: asyncio.Transport | None = None
        self.sender: Sender | None = None  # its writes, once it has a transport
        self.is_closing: Callable[[], bool] = _no_transport  # the transport's, bound once
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: Receiver | None = None
        self.response: ResponseHead | None = None
        self.closed = False
        self.idle_since = 0.0
        self._headers: list[tuple[bytes, bytes]] = []
        self._reading_paused = False
        self._between = True  # between messages (the parser, or a repeated head's body)
        self._last: ResponseHead | None = None  # the last head that may be repeated unparsed
        self._body_left = 0  # body bytes of a repeated head still to come
        self._received = 0  # body bytes the parser passed on from the current read
        self._watched = -1

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.sender = Sender(self.transport)
        self.is_closing = self.transport.is_closing

    def data_received(self, data: bytes) -> None:
        self._relay(data)
        pool = self.pool
        if cedes_cpu(pool.exchanges, pool.yield_at):
            pool.cede()  # let a replica on this core answer more calls before the next read

    def _relay(self, data: bytes) -> None:
        """Pass on what a read from the replica brought."""
        ex = self.exchange
        if ex is None:
            self.close()  # bytes nobody asked for: the connection is not reusable
            return
        if self._body_left:
            self._pass_body(ex, data)
            return
        fresh = self._between  # data begins a response
        last = self._last
        if fresh and last is not None and data.startswith(last.raw):
            end = len(last.raw)
            length = last.content_length or 0  # kept heads have one
            whole = end + length
            if len(data) == whole:
                # The same head as last time and all of its body: one call relays both.
                ex.on_whole(last, data, end)
                return
            if len(data) < whole:
                # The same head with part of its body: what the parser's callbacks would
                # do, without them; the parser stays between messages and the body skips it.
                self._between = False
                ex.on_head(last)
                self._body_left = length
                self._pass_body(ex, data[end:])
                return
        self._received = 0
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            ex.fail(UpstreamError("broken", f"invalid HTTP response: {e}"))
            return
        if fresh and self.response is not None:
            self._remember(self.response, data)
        ex.flush()

    def _pass_body(self, ex: Receiver, data: bytes) -> None:
        left = self._body_left
        if len(data) > left:
            ex.fail(UpstreamError("broken", "the replica sent more than its Content-Length"))
            return
        self._body_left = left - len(data)
        if data:
            ex.on_body(data)
        if not self._body_left:
            self._between = True
            ex.on_complete()
        ex.flush()

    def _remember(self, head: ResponseHead, data: bytes) -> None:
        """Keep ``head`` if ``data`` held it and nothing but its body after it (a final
        response of known length): its bytes are then ``data`` less the body bytes the
        parser passed on (checked against where the head ends), and equal bytes parse
        the same."""
        if head.content_length is None or head.chunked or head.status < 200:
            return
        end = len(data) - self._received
        if data.find(b"\r\n\r\n") + 4 == end:
            head.raw = data[:end]
            head.memo.clear()  # made without its bytes: made again, perhaps as them
            head.last_key = -1
            self._last = head

    def eof_received(self) -> bool | None:
        return None  # close: a replica that ends its side ends the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        ex = self.exchange
        if ex is not None:
            ex.connection_lost()
        self.close_watched()  # no splice writes to it now: its exchange has ended

    def pause_writing(self) -> None:
        ex = self.exchange
        if ex is not None:
            ex.pause_sending()

    def resume_writing(self) -> None:
        ex = self.exchange
        if ex is not None:
            ex.resume_sending()

    # -- httptools callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._between = False
        self._headers = []
        self.response = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        ex = self.exchange
        if ex is None:
            return
        # One pass: framing fields noted, end-to-end fields kept as the client will get
        # them (names as the replica spelled them).
        content_length: int | None = None
        lengths = 0
        dropped = False  # a field the client does not get as it is
        chunked = False
        listed: frozenset[bytes] = frozenset()
        kept: list[bytes] = []
        for name, value in self._headers:
            low = name.lower()
            if low in _RESPONSE_SPECIAL:
                if low == b"content-length":
                    content_length = int(value)
                    lengths += 1
                    continue
                dropped = True
                if low == b"transfer-encoding":
                    chunked = value.strip().lower().endswith(b"chunked")
                elif low == b"connection":
                    listed = listed | connection_listed_bytes((value,))
                continue
            if low[:6] == b"proxy-":
                dropped = True
                continue
            kept += (name, b": ", value, CRLF)
        if listed:
            kept = without_fields(kept, listed)
        head = ResponseHead(
            self.parser.get_status_code(),
            b"".join(kept),
            content_length,
            chunked,
            self.parser.should_keep_alive(),
            verbatim=not dropped and lengths == 1,
        )
        ex.on_head(head)

    def on_body(self, body: bytes) -> None:
        self._received += len(body)
        ex = self.exchange
        if ex is not None:
            ex.on_body(body)

    def on_message_complete(self) -> None:
        self._between = True
        ex = self.exchange
        if ex is not None and ex.status:
            ex.on_complete()

    # -- used by the exchange -------------------------------------------------------------

    def write(self, data: Chunk) -> None:
        sender = self.sender
        if sender is not None and not self.closed:
            sender.send(data)

    def write_pair(self, head: bytes, body: Chunk) -> None:
        sender = self.sender
        if sender is not None and not self.closed:
            sender.pair(head, body)

    def write_body(self, data: Chunk) -> None:
        self.write(data)

    def splice_target(self) -> tuple[int, Callable[[], int]] | None:
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return None
        fd = self.watched_fd()
        return (fd, transport.get_write_buffer_size) if fd >= 0 else None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self.pool.forget(self)


def request_head(method: str, path_qs: str, host: bytes, header_lines: list[bytes]) -> bytes:
    """``METHOD path HTTP/1.1`` + Host + the (already filtered) header lines."""
    return b"%s %s HTTP/1.1\r\nhost: %s\r\n%s\r\n" % (
        method.encode("latin-1"),
        path_qs.encode("latin-1"),
        host,
        b"".join(header_lines),
    )


class Exchange(Receiver):
    """Relays one request to ``upstream`` and its response to the client, entirely in
    callbacks (no task, no future): :meth:`send` writes the request; the parser's
    callbacks collect the response head and body, and what one ``data_received`` brought
    is written to the client in a single write (:meth:`flush`). When it ends — complete,
    failed, or aborted by the client leaving — :meth:`done` is called once (it calls
    ``on_done(exchange)``; a subclass may end otherwise).

    ``status`` is what the client was sent (0: nothing yet — then the caller answers an
    ``error`` with a problem); ``error`` is the :class:`UpstreamError`, if any."""

    __slots__ = (
        "_chunked_out",
        "_out",
        "_started",
        "_timeout_s",
        "aborted",
        "client",
        "complete",
        "deadline",
        "error",
        "finished",
        "head_only",
        "on_done",
        "request",
        "request_body_sent",
        "upstream",
    )

    def __init__(
        self,
        request: Request,
        upstream: UpstreamConnection,
        *,
        timeout_s: float | None,
        on_done: Callable[[Exchange], None] | None = None,
    ) -> None:
        super().__init__()
        self.request = request
        self.client = request.conn
        self.upstream = upstream
        self.on_done = on_done
        self.head_only = request.head.head_only
        self.error: UpstreamError | None = None
        self.complete = False
        self.finished = False
        self.aborted = False
        self.request_body_sent = True  # False while a streamed body is still coming
        self._out: list[bytes] | None = None  # what flush writes (made when needed)
        self._started = False
        self._chunked_out = False
        self._timeout_s = timeout_s
        self.deadline = 0.0  # pool time past which the replica is late (0: no limit)
        upstream.exchange = self
        upstream.pool.exchanges += 1  # until _end
        request.on_abort(self)

    def send(self, head: bytes, body: Chunk | None, now: float) -> None:
        """Write the request head and the body buffered so far; start the answer timeout
        at ``now`` (the pool's :attr:`Pool.time`, read by the caller)."""
        if body:
            self.upstream.write_pair(head, body)
        else:
            self.upstream.write(head)
        if self._timeout_s is not None:
            self.deadline = now + self._timeout_s
            self.upstream.pool.watch(self)

    def abort(self) -> None:
        """The client left: drop the replica connection (it cannot be reused mid-way)."""
        if self.finished:
            return
        self.aborted = True
        self.upstream.close()
        self._end()

    # -- fed by the upstream connection --------------------------------------------------

    def on_head(self, head: ResponseHead) -> None:
        if head.status < 200:
            return  # 1xx interim responses: nothing to relay (we never send Expect)
        self._put(self._client_head(head))
        if self.head_only:
            # llhttp would otherwise wait for a HEAD response's announced body.
            self.complete = True

    def on_whole(self, head: ResponseHead, data: bytes, end: int) -> None:
        """A repeated final head (it has a length) with all of its body, from one read:
        what ``on_head``, ``on_body``, ``on_complete`` and ``flush`` do, in one write —
        of ``data`` as it came when the client's head is the replica's."""
        self.complete = True
        out = self._client_head(head)  # nothing else waits in _out
        if out is head.raw:
            self.client.write(data)
        else:
            self.client.write_pair(out, data[end:])
        self._end()

    def _client_head(self, head: ResponseHead) -> bytes:
        """The head the client gets for ``head`` (made once per kind of request); notes
        the status, the framing and whether the client connection stays open."""
        req = self.request
        http11 = req.head.http11
        key = http11 | req.keep_alive << 1 | self.head_only << 2
        if key == head.last_key:
            made = head.last_made
        else:
            found = head.memo.get(key)
            if found is None:
                found = head.memo[key] = response_head_bytes(
                    head,
                    client_http11=http11,
                    keep_alive=req.keep_alive,
                    head_only=self.head_only,
                )
            made = head.last_made = found
            head.last_key = key
        out, self._chunked_out, req.keep_alive = made
        self.status = head.status
        self.upstream.response = head
        return out

    def on_body(self, data: bytes) -> None:
        if self._chunked_out:
            self._put(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            self._put(data)

    def on_complete(self) -> None:
        if self._chunked_out:
            self._put(b"0\r\n\r\n")
        self.complete = True

    def _put(self, data: bytes) -> None:
        out = self._out
        if out is None:
            self._out = [data]
        else:
            out.append(data)

    def flush(self) -> None:
        """After each read from the replica: pass on what it brought, in one write."""
        if self.finished:
            return
        out = self._out
        if out is not None:
            self.client.write_parts(out)
            self._out = None
        if self.complete:
            self._end()
        else:
            if self.status and not self._started:
                self._started = True
                self.client.producer = self
                if self.client.writing_paused:
                    self.pause_producing()
            if self._timeout_s is not None:
                # Mid-response the limit is on stalls: restart it with each read.
                self.deadline = self.upstream.pool.time() + self._timeout_s

    def connection_lost(self) -> None:
        if self.finished:
            return
        head = self.upstream.response
        if (
            self.status
            and head is not None
            and head.content_length is None
            and not head.chunked
            and not self.head_only
        ):
            # A body delimited by the connection's end (HTTP/1.0 style): this is its end.
            self.on_complete()
            self.flush()
            return
        self.fail(UpstreamError("broken", "the replica closed the connection"))

    def fail(self, error: UpstreamError) -> None:
        if self.finished:
            return
        self.error = error
        self.upstream.close()
        if self.status:
            # The status is out: a truncated body is all that can still tell the client.
            self.request.keep_alive = False
            self.client.close()
        self._end()

    # -- flow control ---------------------------------------------------------------------

    def pause_sending(self) -> None:
        """The replica's socket buffer is full: stop reading the client's body."""
        self.client.pause_reading()

    def resume_sending(self) -> None:
        self.client.resume_reading()

    def pause_producing(self) -> None:
        self.upstream.pause_reading()

    def resume_producing(self) -> None:
        self.upstream.resume_reading()

    # -- internals ------------------------------------------------------------------------

    def _end(self) -> None:
        self.finished = True
        up = self.upstream
        up.pool.exchanges -= 1
        now = up.pool.time()  # read once for the connection's idle time and the call's end
        if self.deadline:
            up.pool.unwatch(self)
        self.request.on_abort(None)
        if self.client.producer is self:
            self.client.producer = None
        if not self.request_body_sent:
            self.request.body.detach()  # the rest of a streamed body goes nowhere now
        up.exchange = None
        if self.complete and self.error is None and not self.aborted:
            head = up.response
            if (
                (self.request_body_sent or self.request.body.complete)
                and head is not None
                and head.keep_alive
                and not self.head_only
                and not up.closed
            ):
                up.pool.release(up, now)
            else:
                up.close()
        self.done(now)

    def done(self, now: float) -> None:
        """The exchange ended at ``now`` (see ``error``, ``aborted`` and ``status``)."""
        if self.on_done is not None:
            self.on_done(self)

    def check_deadline(self, now: float) -> None:
        """Called by the pool's timer about once per tick while ``deadline`` is set."""
        if self.finished or not self.deadline or now < self.deadline:
            return
        if not self.status:
            self.fail(UpstreamError("timeout", "no answer in time"))
        elif self.client.writing_paused:
            # Waiting on the client is not the replica's fault.
            assert self._timeout_s is not None
            self.deadline = now + self._timeout_s
        else:
            self.fail(UpstreamError("timeout", "the replica stalled mid-response"))


def response_head_bytes(
    head: ResponseHead, *, client_http11: bool, keep_alive: bool, head_only: bool
) -> tuple[bytes, bool, bool]:
    """The head to send the client: the replica's status and end-to-end headers, with
    framing decided here. Returns ``(bytes, chunked_out, keep_alive)``: the bytes are
    ``head.raw`` itself when they would say the same (a head of known length with no field
    to drop, an HTTP/1.1 client keeping its connection), so the caller may relay the
    replica's bytes as they came."""
    if (
        head.verbatim
        and client_http11
        and keep_alive
        and not head_only
        and head.status != 204  # (its Content-Length is not relayed)
        and head.raw.startswith(status_line(head.status))
    ):
        return head.raw, False, True
    framing = b""
    chunked_out = False
    if head.content_length is not None:
        if head.status != 204:
            framing = b"content-length: %d\r\n" % head.content_length
    elif not (head_only or head.status in _NO_BODY_STATUS):
        if client_http11:
            framing = b"transfer-encoding: chunked\r\n"
            chunked_out = True
        else:
            keep_alive = False  # HTTP/1.0: the body ends with the connection
    if not keep_alive:
        framing += b"connection: close\r\n"
    return status_line(head.status) + head.passthrough + framing + CRLF, chunked_out, keep_alive
