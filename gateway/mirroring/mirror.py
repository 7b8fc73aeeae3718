"""Mirroring: a share of a service's requests also goes to other services (its mirror's
targets), off the caller's path, and their answers are compared with the primary's.

:class:`gateway.http.proxy.PredictProxy` asks :meth:`gateway.mirroring.shadows.Mirrors.copy`
for each request of a service that has a mirror whether this one is mirrored (exactly
``ratio`` % of them, by :class:`gateway.routing.traffic.RatioPicker`); a mirrored one goes
the coroutine path with a :class:`RecordingExchange`, which relays the primary's answer as
usual while keeping a copy. When the caller has its answer,
:meth:`gateway.mirroring.shadows.Mirrors.launch` sends the same request to a ready replica of
each target in a background task (:class:`ShadowCall`, on the gateway's own keep-alive
pools, with the target's timeout) and counts the result: ``match``,
``mismatch``, ``error`` (no ready replica, refused, timed out, broke) or ``skipped`` — not
comparable (a streamed request body, a primary answer over the copy limit or failed) or over
the bound of shadows in flight per target. So a slow or dead shadow costs the caller
nothing, and memory stays bounded: at most ``max_in_flight`` shadows per target, each
holding at most the buffered request body and two answers of ``max_answer_bytes``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.http.server import Request
from gateway.http.upstream import (
    Exchange,
    Receiver,
    ResponseHead,
    UpstreamConnection,
    UpstreamError,
)
from gateway.mirroring.compare import Answer
from gateway.routing.traffic import MirrorState

MAX_IN_FLIGHT = 16  # shadows per (service, target) per gateway process
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # an answer kept for comparison, primary's or shadow's
_HEADER_LENGTH = b"inference-header-content-length"


def header_length(head: ResponseHead) -> int | None:
    """The answer's ``Inference-Header-Content-Length`` (Triton's binary extension)."""
    for line in head.passthrough.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == _HEADER_LENGTH:
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


class Collected:
    """An answer gathered up to ``limit`` body bytes (``too_big`` past it)."""

    __slots__ = ("chunks", "complete", "head", "limit", "size", "too_big")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head: ResponseHead | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.complete = False
        self.too_big = False

    def on_head(self, head: ResponseHead) -> None:
        self.head = head
        self.too_big = head.content_length is not None and head.content_length > self.limit

    def on_body(self, data: bytes) -> None:
        if self.too_big:
            return
        self.size += len(data)
        if self.size > self.limit:
            self.too_big = True
            self.chunks = []
        else:
            self.chunks.append(data)

    def answer(self) -> Answer | None:
        """The whole answer, or None when it is incomplete or over the limit."""
        head = self.head
        if not self.complete or self.too_big or head is None:
            return None
        return Answer(head.status, b"".join(self.chunks), header_length(head))


class Copy:
    """One mirrored request: what the shadows get, and the primary's answer as it comes."""

    __slots__ = ("body", "headers", "method", "mirror", "path_qs", "primary", "service")

    def __init__(
        self, service: str, mirror: MirrorState, method: str, path_qs: str, limit: int
    ) -> None:
        self.service = service
        self.mirror = mirror
        self.method = method
        self.path_qs = path_qs
        self.headers: list[bytes] = []  # as forwarded to the primary (Host apart)
        self.body: bytes | None = None
        self.primary = Collected(limit)


class RecordingExchange(Exchange):
    """An :class:`Exchange` that also keeps the primary's answer in its :class:`Copy`."""

    __slots__ = ("copy",)

    def __init__(
        self,
        request: Request,
        upstream: UpstreamConnection,
        *,
        timeout_s: float | None,
        on_done: Callable[[Exchange], None],
        copy: Copy,
    ) -> None:
        super().__init__(request, upstream, timeout_s=timeout_s, on_done=on_done)
        self.copy = copy

    def on_head(self, head: ResponseHead) -> None:
        super().on_head(head)
        if head.status >= 200:
            self.copy.primary.on_head(head)

    def on_whole(self, head: ResponseHead, data: bytes, end: int) -> None:
        primary = self.copy.primary
        primary.on_head(head)
        primary.on_body(data[end:])
        primary.complete = True
        super().on_whole(head, data, end)

    def on_body(self, data: bytes) -> None:
        super().on_body(data)
        self.copy.primary.on_body(data)

    def on_complete(self) -> None:
        super().on_complete()
        self.copy.primary.complete = True


class ShadowCall(Receiver):
    """One request to a target's replica whose answer is kept, not relayed: the
    :class:`gateway.http.upstream.Receiver` of its connection until it ends."""

    __slots__ = ("_done", "_timeout_s", "answer", "deadline", "error", "finished", "upstream")

    def __init__(self, upstream: UpstreamConnection, *, timeout_s: float, limit: int) -> None:
        super().__init__()
        self.upstream = upstream
        self.answer = Collected(limit)
        self.error: UpstreamError | None = None
        self.finished = False
        self.deadline = 0.0
        self._timeout_s = timeout_s
        self._done: asyncio.Future[None] = upstream.pool.loop.create_future()
        upstream.exchange = self

    def start(self, head: bytes, body: bytes | None) -> asyncio.Future[None]:
        """Send; the future is done at the end of the answer (see ``error``)."""
        self.upstream.write(head + body if body else head)
        self.deadline = self.upstream.pool.time() + self._timeout_s
        self.upstream.pool.watch(self)
        return self._done

    # -- fed by the upstream connection (gateway.http.upstream.Receiver) ----------------------

    def on_head(self, head: ResponseHead) -> None:
        if head.status >= 200:
            self.answer.on_head(head)
            self.status = head.status

    def on_whole(self, head: ResponseHead, data: bytes, end: int) -> None:
        self.on_head(head)
        self.on_body(data[end:])
        self.on_complete()
        self.flush()

    def on_body(self, data: bytes) -> None:
        self.answer.on_body(data)
        if self.answer.too_big:
            self._end()  # nothing more worth reading: a mismatch already

    def on_complete(self) -> None:
        self.answer.complete = True

    def flush(self) -> None:
        if self.answer.complete and not self.finished:
            self._end()

    def connection_lost(self) -> None:
        head = self.answer.head
        if head is not None and head.content_length is None and not head.chunked:
            self.answer.complete = True  # a body delimited by the connection's end
            self.flush()
        else:
            self.fail(UpstreamError("broken", "the replica closed the connection"))

    def fail(self, error: UpstreamError) -> None:
        if not self.finished:
            self.error = error
            self._end()

    def check_deadline(self, now: float) -> None:
        if not self.finished and now >= self.deadline:
            self.fail(UpstreamError("timeout", "no answer in time"))

    def pause_sending(self) -> None:
        pass  # the request is written whole; the transport buffers it

    def resume_sending(self) -> None:
        pass

    def _end(self) -> None:
        if self.finished:
            return
        self.finished = True
        up = self.upstream
        up.pool.unwatch(self)
        up.exchange = None
        head = self.answer.head
        reusable = self.answer.complete and not self.answer.too_big and self.error is None
        if reusable and head is not None and head.keep_alive and not up.closed:
            up.pool.release(up, up.pool.time())
        else:
            up.close()
        if not self._done.done():
            self._done.set_result(None)
