"""The gRPC door's HTTP/2 relay: callers' streams are admitted one by one and spliced onto
shared HTTP/2 connections to the chosen replicas, frame by frame.

Why a relay and not a gRPC server: a call's messages never need decoding, and grpcio's
server and channel cost several times what Triton spends on a small call. Here a call
costs its few frames: DATA passes with its stream id rewritten, header blocks are decoded
once per distinct block (:mod:`gateway.grpc.hpack_codec`) and re-encoded without HPACK state
(:mod:`gateway.grpc.h2wire`), so they are cached too.

Flow control, per direction: the relay grants a sender credit for a stream's bytes only
once it has passed them on to the other side (what the receiver's window allowed), so a
slow reader holds back only its own streams and memory stays within the windows. Every
connection's own window is kept wide open. Writes made while handling one read are sent
in one system call (:meth:`Relay.flush`).

What a peer can make the relay hold is bounded: a stream's bytes by the window it was
given (sending past it ends the connection), a caller's streams by MAX_CONCURRENT_STREAMS,
a header block by :data:`MAX_HEADER_BLOCK`, and answers to a peer that does not read by
its transport's high-water mark (the relay then stops reading that peer too). A replica is
sent no more streams at once on a connection than its SETTINGS allow: a full connection is
retired and calls go on a new one (:meth:`Relay.upstream`).

Which calls pass (service, token, limits: :mod:`gateway.admission`, shared with the HTTP
door) and which replica takes them is the door's, :mod:`gateway.grpc.server`, asked through
the :class:`Door` interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABCMeta, abstractmethod
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

from gateway.grpc import h2wire as h2
from gateway.grpc.h2wire import Bytes
from gateway.grpc.hpack_codec import BlockDecoder, Fields
from gateway.grpc.rules import CallHead, Refusal, call_head, deadline_s
from gateway.http.writes import write_parts
from gateway.http.yielding import cedes_cpu
from gateway.http.yielding import sched_yield as _sched_yield  # (a name tests replace)
from gateway.routing.balancer import Endpoint
from gateway.routing.route_table import Asleep, ServiceRoute

STREAM_WINDOW = 4 * 1024 * 1024  # per stream, each way: a 1 MB tensor never waits on credit
CONN_WINDOW = 1 << 30
# gRPC's peers take 4 MiB frames (grpc-core's own setting): a 1 MB tensor passes in one.
FRAME_MAX_ADVERTISED = 4 * 1024 * 1024
_PASS_ON = 65_536  # DATA frames larger than this are passed on as they arrive
MAX_HEADER_BLOCK = 65_536  # a header block past this (CONTINUATIONs included) ends the connection
# A caller's streams at once: with the stream window, what one connection may make us hold.
MAX_STREAMS = 256
# A replica's streams at once before its SETTINGS say (RFC 9113 recommends at least 100;
# Go's client assumes as much): its first SETTINGS then give the limit, or none.
UNSETTLED_STREAMS = 100
UNLIMITED = 2**31
_COPY_BELOW = 16_384  # a queued DATA payload smaller than this is copied, not a view that
# would keep its whole read buffer (up to 256 KiB) alive
_SETTINGS = [
    (h2.INITIAL_WINDOW_SIZE, STREAM_WINDOW),
    (h2.MAX_FRAME_SIZE, FRAME_MAX_ADVERTISED),
    (h2.MAX_HEADER_LIST_SIZE, 65_536),
]
_CLIENT_SETTINGS = h2.settings([(h2.MAX_CONCURRENT_STREAMS, MAX_STREAMS), *_SETTINGS]) + (
    h2.window_update(0, CONN_WINDOW - h2.DEFAULT_WINDOW)
)
_pack_head, _unpack_head = h2.HEAD.pack, h2.HEAD.unpack_from
_UPSTREAM_SETTINGS = (
    h2.PREFACE
    + h2.settings([(h2.ENABLE_PUSH, 0), *_SETTINGS])
    + h2.window_update(0, CONN_WINDOW - h2.DEFAULT_WINDOW)
)


class Door(Protocol):
    """What the relay asks of the gateway per call (:class:`gateway.grpc.server.GrpcDoor`)."""

    max_message_bytes: int

    def admit(self, head: CallHead) -> ServiceRoute:
        """The call's service, its place taken; raises :class:`Refusal` or :class:`Asleep`."""

    async def wake(self, entry: ServiceRoute) -> None:
        """Until the service at zero has a ready replica; raises :class:`Refusal`."""

    def choose(self, entry: ServiceRoute) -> Endpoint: ...

    def ended(self, call: Call, code: str) -> None:
        """Give back the call's place (if it was admitted) and count it under ``code``."""

    def unreachable(self, endpoint: Endpoint) -> None: ...


# -- one direction of one call ----------------------------------------------------------------


class Leg:
    """A call's stream on one connection: what the relay may still send on it (the peer's
    window), what waits for that window, and the credit owed to the peer for bytes of it
    already passed on."""

    __slots__ = (
        "call",
        "conn",
        "ended_in",
        "ended_out",
        "owed",
        "pending",
        "sid",
        "unacked",
        "window",
    )

    def __init__(self, call: Call, conn: Conn, sid: int) -> None:
        self.call = call
        self.conn = conn
        self.sid = sid
        self.window = conn.peer_initial_window
        # (frame type, payload, end stream, credit for the other leg's peer)
        self.pending: deque[tuple[int, Bytes, bool, int]] = deque()
        self.owed = 0
        self.unacked = 0  # bytes the peer sent on it that no WINDOW_UPDATE has given back
        self.ended_in = False  # the peer ended its side of the stream
        self.ended_out = False  # the relay ended ours

    def credit(self, amount: int) -> None:
        """``amount`` bytes this leg's peer sent have been passed on: let it send more."""
        if self.ended_in or not amount:
            return
        self.owed += amount
        if self.owed >= STREAM_WINDOW // 4:
            self.conn.write(h2.window_update(self.sid, self.owed))
            self.unacked -= self.owed
            self.owed = 0

    def received(self, length: int) -> None:
        """``length`` bytes of DATA arrived on it: a peer sending past the window it was
        given breaks the protocol (and would make the relay hold what it sends)."""
        self.unacked += length
        if self.unacked > STREAM_WINDOW:
            raise h2.ProtocolError(f"stream {self.sid}: DATA past the flow-control window")


class Call:
    """One gRPC call: the caller's stream (``down``) spliced to the replica's (``up``)."""

    __slots__ = (
        "code",
        "deadline",
        "down",
        "endpoint",
        "entry",
        "finished",
        "headers_sent",
        "held",
        "msg_left",
        "ours",
        "prefix",
        "service",
        "started",
        "timeout_s",
        "up",
    )

    def __init__(
        self, client: ClientConn, sid: int, entry: ServiceRoute | None, service: str = ""
    ) -> None:
        self.down = Leg(self, client, sid)
        self.up: Leg | None = None
        self.entry = entry  # None: refused by the relay itself
        self.service = entry.service if entry is not None else service
        self.endpoint: Endpoint | None = None
        self.started = time.perf_counter()
        self.deadline: int | None = None  # its slot in Deadlines, while it runs
        self.timeout_s = 0.0
        self.ours = True  # the deadline is the route's (not the caller's grpc-timeout)
        self.headers_sent = False
        self.finished = False
        self.code = "OK"
        # What the caller sent while the call waits for its service to wake from zero.
        self.held: list[tuple[Bytes, int, int]] | None = None
        self.msg_left = 0  # bytes of the current request message still to come
        self.prefix = b""  # a message's 5-byte prefix, while split across frames

    def over_limit(self, data: Bytes, limit: int) -> bool:
        """Whether a request message in ``data`` (continuing earlier frames) is declared
        larger than ``limit`` by its length prefix."""
        i, n = 0, len(data)
        if not self.msg_left and not self.prefix and n >= 5:
            size = int.from_bytes(data[1:5], "big")
            if n == 5 + size:  # the common frame: one whole message
                return size > limit
        while i < n:
            if self.msg_left:
                step = min(self.msg_left, n - i)
                self.msg_left -= step
                i += step
                continue
            take = bytes(data[i : i + 5 - len(self.prefix)])
            self.prefix += take
            i += len(take)
            if len(self.prefix) == 5:
                size = int.from_bytes(self.prefix[1:], "big")
                self.prefix = b""
                if size > limit:
                    return True
                self.msg_left = size
        return False


# -- connections ------------------------------------------------------------------------------


class Conn(asyncio.Protocol, metaclass=ABCMeta):
    """What both ends share: framing, SETTINGS, PING, connection and stream windows."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self._buf = b""  # the preface so far (callers)
        self._part: list[Bytes] = []  # a frame begun in earlier reads
        self._part_len = 0
        # A large DATA frame being passed on as it arrives: its leg, bytes still to come,
        # and whether it ends the stream.
        self._passing: tuple[Leg | None, int, int] | None = None
        self._out: list[Bytes] = []
        self.legs: dict[int, Leg] = {}
        self.peer_initial_window = h2.DEFAULT_WINDOW
        self.peer_max_frame = h2.FRAME_MAX
        self.peer_max_streams = UNSETTLED_STREAMS  # the streams we may open (to replicas)
        self.settled = False  # the peer's first SETTINGS came
        self.send_window = h2.DEFAULT_WINDOW
        self.blocked: dict[Leg, None] = {}  # legs with pending frames, in arrival order
        self.received = 0  # DATA bytes not yet credited on the connection window
        self._headers: tuple[int, int, bytearray] | None = None  # a block in CONTINUATIONs
        self.closed = False
        self.paused = False  # a caller that does not read: nothing more is sent to it

    # -- output ---------------------------------------------------------------------------

    def write(self, data: Bytes) -> None:
        if not self._out:
            self.relay.dirty.append(self)
        self._out.append(data)

    def flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.closed and out:
            write_parts(self.transport, out)

    def send(self, leg: Leg, kind: int, payload: Bytes, end: bool, credit: int = 0) -> None:
        """DATA (flow-controlled) or a header block on ``leg``, in order after what waits;
        what the windows do not take now waits for the peer's WINDOW_UPDATE."""
        if (
            leg.pending
            or self.paused
            or (kind == h2.DATA and len(payload) > min(leg.window, self.send_window))
        ):
            if isinstance(payload, memoryview) and len(payload) < _COPY_BELOW:
                payload = bytes(payload)
            leg.pending.append((kind, payload, end, credit))
            self.blocked[leg] = None
            self._drain(leg)  # what fits goes now: a peer that got nothing sends no update
            return
        self._emit(leg, kind, payload, end, credit)

    def _emit(self, leg: Leg, kind: int, payload: Bytes, end: bool, credit: int) -> None:
        if kind == h2.DATA:
            n = len(payload)
            leg.window -= n
            self.send_window -= n
            size = self.peer_max_frame
            last = n
            if n > size:  # larger than the peer takes in one frame
                for at in range(0, n - size, size):
                    self.write(_pack_head(size << 8 | h2.DATA, 0, leg.sid))
                    self.write(payload[at : at + size])
                last = n - (n - 1) // size * size
                payload = payload[n - last :]
            self.write(_pack_head(last << 8 | h2.DATA, h2.END_STREAM if end else 0, leg.sid))
            if last:
                self.write(payload)
        else:
            self.write(h2.headers_frames(leg.sid, bytes(payload), end_stream=end))
        other = leg.call.up if leg is leg.call.down else leg.call.down
        if other is not None and credit:
            other.credit(credit)
        if end:
            leg.ended_out = True
            self.relay.sent_end(leg)

    def _unblock(self) -> None:
        for leg in list(self.blocked):
            self._drain(leg)
            if self.send_window <= 0:
                return

    def _drain(self, leg: Leg) -> None:
        """Send what waits on ``leg`` as far as the windows allow."""
        while leg.pending and not self.paused:
            kind, payload, end, credit = leg.pending[0]
            if kind == h2.DATA:
                room = min(leg.window, self.send_window)
                if room < len(payload):  # send what fits, keep the rest (and the credit)
                    if room <= 0:
                        break
                    leg.pending[0] = (kind, payload[room:], end, credit)
                    self._emit(leg, kind, payload[:room], False, 0)
                    continue
            leg.pending.popleft()
            self._emit(leg, kind, payload, end, credit)
        if not leg.pending:
            self.blocked.pop(leg, None)

    def drop(self, leg: Leg) -> None:
        """Forget ``leg``: its stream is over on this connection."""
        leg.pending.clear()
        self.blocked.pop(leg, None)
        if self.legs.get(leg.sid) is leg:
            del self.legs[leg.sid]

    # -- input ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        view: memoryview | None = memoryview(data)
        try:
            if self._passing is not None:
                view = self._pass_on(memoryview(data))
            elif self._part:  # (never both: a frame being passed on is not stored)
                view = self._complete(memoryview(data))
            if view is not None:
                at = self._frames(view)
                if at < len(view):
                    self._part, self._part_len = [view[at:]], len(view) - at
        except h2.ProtocolError as e:
            self.fail(str(e))
        relay = self.relay
        relay.flush()
        if cedes_cpu(relay.calls, relay.yield_at):
            _sched_yield()

    def _pass_on(self, view: memoryview) -> memoryview:
        """The next part of a large DATA frame goes on at once (not stored until it is
        whole, which would add its transfer time); what follows it in ``view``."""
        assert self._passing is not None
        leg, left, end = self._passing
        part = view[:left]
        left -= len(part)
        self._passing = (leg, left, end) if left else None
        if leg is not None and self.legs.get(leg.sid) is leg:
            self.on_data(leg, part, 0 if left else end, len(part))
        return view[len(part) :]

    def _complete(self, view: memoryview) -> memoryview | None:
        """Join the frame begun in earlier reads once ``view`` completes it (one copy of
        that frame); what follows it in ``view``, or None while it is still incomplete."""
        self._part.append(view)
        self._part_len += len(view)
        if self._part_len < 9:
            return None
        first = self._part[0] if len(self._part[0]) >= 9 else b"".join(self._part)
        length = first[0] << 16 | first[1] << 8 | first[2]
        if length > FRAME_MAX_ADVERTISED:
            raise h2.ProtocolError("frame larger than SETTINGS_MAX_FRAME_SIZE")
        total = 9 + length
        if self._part_len < total:
            return None
        rest = len(view) - (self._part_len - total)
        frame = memoryview(b"".join([*self._part[:-1], view[:rest]]))
        self._part, self._part_len = [], 0
        self._frames(frame)
        return view[rest:]

    def _frames(self, buf: memoryview) -> int:
        """Handle the whole frames in ``buf``; how many bytes they took."""
        at, n = 0, len(buf)
        while n - at >= 9:
            length, flags, sid = _unpack_head(buf, at)  # h2.parse_head, inlined: per frame
            kind = length & 0xFF
            length >>= 8
            sid &= h2.MAX_WINDOW
            end = at + 9 + length
            if end > n:
                if length > FRAME_MAX_ADVERTISED:
                    raise h2.ProtocolError("frame larger than SETTINGS_MAX_FRAME_SIZE")
                if kind == h2.DATA and length > _PASS_ON and not flags & h2.PADDED:
                    self._count_received(length)
                    leg = self.legs.get(sid)
                    if leg is not None:
                        leg.received(length)
                    self._passing = (leg, end - n, flags & h2.END_STREAM)
                    if leg is not None:
                        self.on_data(leg, buf[at + 9 :], 0, n - at - 9)
                    return n
                break
            payload: Bytes = buf[at + 9 : end]
            at = end
            if self._headers is not None and kind != h2.CONTINUATION:
                raise h2.ProtocolError("a header block interrupted")
            if kind == h2.DATA:
                self._count_received(length)
                leg = self.legs.get(sid)
                if leg is not None:
                    leg.received(length)
                    if flags & h2.PADDED:
                        payload = h2.unpad(flags, payload)
                    self.on_data(leg, payload, flags & h2.END_STREAM, length)
            elif kind == h2.HEADERS:
                fragment = (
                    h2.unpad(flags, payload, priority=True)
                    if flags & (h2.PADDED | h2.PRIORITY_FLAG)
                    else payload
                )
                if len(fragment) > MAX_HEADER_BLOCK:
                    raise h2.ProtocolError("header block larger than the relay takes")
                if flags & h2.END_HEADERS:
                    self.on_headers(sid, bytes(fragment), flags & h2.END_STREAM)
                else:
                    self._headers = (sid, flags, bytearray(fragment))
            elif kind == h2.CONTINUATION:
                if self._headers is None or self._headers[0] != sid:
                    raise h2.ProtocolError("CONTINUATION without its HEADERS")
                self._headers[2].extend(payload)
                if len(self._headers[2]) > MAX_HEADER_BLOCK:
                    raise h2.ProtocolError("header block larger than the relay takes")
                if flags & h2.END_HEADERS:
                    first, first_flags, block = self._headers
                    self._headers = None
                    self.on_headers(first, bytes(block), first_flags & h2.END_STREAM)
            elif kind == h2.WINDOW_UPDATE:
                self._window_update(sid, h2.parse_u32(payload))
            elif kind == h2.RST_STREAM:
                leg = self.legs.get(sid)
                if leg is not None:
                    self.on_reset(leg, h2.parse_u32(payload))
            elif kind == h2.SETTINGS:
                if not flags & h2.ACK:
                    self._settings(h2.parse_settings(payload))
            elif kind == h2.PING:
                if length != 8:
                    raise h2.ProtocolError("PING payload is not 8 bytes")
                if not flags & h2.ACK:
                    self.write(h2.ping_ack(bytes(payload)))
            elif kind == h2.GOAWAY:
                self.on_goaway(int.from_bytes(payload[:4], "big") & h2.MAX_WINDOW)
            # PRIORITY, PUSH_PROMISE (refused by ENABLE_PUSH 0) and unknown types: ignored
        return at

    def _count_received(self, length: int) -> None:
        """Keep the connection's own window open: credit it once half is used."""
        self.received += length
        if self.received >= CONN_WINDOW // 2:
            self.write(h2.window_update(0, self.received))
            self.received = 0

    def _window_update(self, sid: int, increment: int) -> None:
        # RFC 9113 §6.9: a zero increment, or a window past 2^31-1, is an error (a stream
        # error may be treated as the connection's, §5.4.1)
        if not increment:
            raise h2.ProtocolError("WINDOW_UPDATE of 0")
        if sid == 0:
            self.send_window += increment
            window = self.send_window
        else:
            leg = self.legs.get(sid)
            if leg is None:
                return
            leg.window += increment
            window = leg.window
        if window > h2.MAX_WINDOW:
            raise h2.ProtocolError("flow-control window past 2^31-1")
        if self.blocked:
            self._unblock()

    def _settings(self, values: list[tuple[int, int]]) -> None:
        if not self.settled:
            self.settled, self.peer_max_streams = True, UNLIMITED
        for key, value in values:
            if key == h2.INITIAL_WINDOW_SIZE:
                if value > h2.MAX_WINDOW:
                    raise h2.ProtocolError("SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for leg in self.legs.values():
                    leg.window += delta
            elif key == h2.MAX_FRAME_SIZE:
                self.peer_max_frame = max(h2.FRAME_MAX, min(value, FRAME_MAX_ADVERTISED))
            elif key == h2.MAX_CONCURRENT_STREAMS:
                self.peer_max_streams = value
        self.write(h2.SETTINGS_ACK)
        if self.blocked:
            self._unblock()

    def fail(self, why: str) -> None:
        """The peer broke the protocol: tell it and hang up."""
        self.write(h2.goaway(0, h2.PROTOCOL_ERROR))
        self.flush()
        if self.transport is not None:
            self.transport.close()

    # -- per end (the caller's and the replica's differ) -------------------------------------

    @abstractmethod
    def on_data(self, leg: Leg, data: Bytes, end: int, length: int) -> None:
        """DATA on ``leg``'s stream (``length`` counts padding, for flow control)."""

    @abstractmethod
    def on_headers(self, sid: int, block: bytes, end: int) -> None:
        """A whole header block (CONTINUATIONs joined) on stream ``sid``."""

    @abstractmethod
    def on_reset(self, leg: Leg, code: int) -> None:
        """RST_STREAM on ``leg``'s stream."""

    @abstractmethod
    def on_goaway(self, last_sid: int) -> None:
        """GOAWAY: streams above ``last_sid`` were never seen by the peer."""


class ClientConn(Conn):
    """A caller's connection to the door."""

    def __init__(self, relay: Relay) -> None:
        super().__init__(relay)
        self.decoder: BlockDecoder[CallHead] = BlockDecoder(call_head)
        self.preface = False
        self.last_sid = 0
        self.going_away = False

    def pause_writing(self) -> None:
        """The caller reads slower than we write: stop sending to it (what is for it
        waits, uncredited, so flow control holds back the replica) and stop reading it, so
        that its requests (PINGs, new streams) cannot pile answers up here. A replica's
        connection is never paused so: flow control bounds what it takes, and not reading
        a replica that waits for us to read would deadlock both."""
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()
        self._unblock()
        self.relay.flush()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.relay.clients.add(self)
        self.write(_CLIENT_SETTINGS)
        self.relay.flush()

    def data_received(self, data: bytes) -> None:
        if not self.preface:
            data = self._buf + data
            if len(data) < len(h2.PREFACE):
                if not h2.PREFACE.startswith(data):
                    self.fail("not HTTP/2 with prior knowledge")
                self._buf = data
                return
            if not data.startswith(h2.PREFACE):
                self.fail("not HTTP/2 with prior knowledge")
                return
            self.preface = True
            self._buf, data = b"", data[len(h2.PREFACE) :]
        super().data_received(data)

    def on_headers(self, sid: int, block: bytes, end: int) -> None:
        head = self.decoder.decode(block)
        leg = self.legs.get(sid)
        if leg is not None:  # trailers from a caller: gRPC has none; only the end counts
            if end:
                self.on_data(leg, b"", end, 0)
            return
        if not sid % 2:
            raise h2.ProtocolError(f"a client cannot open the even stream {sid}")
        if sid <= self.last_sid:
            return  # a stream already over (reset by the relay)
        self.last_sid = sid
        if self.going_away or len(self.legs) >= MAX_STREAMS:  # past the SETTINGS it was sent
            self.write(h2.rst_stream(sid, h2.REFUSED_STREAM))
            return
        self.relay.open(self, sid, head, bool(end))

    def on_data(self, leg: Leg, data: Bytes, end: int, length: int) -> None:
        call, relay = leg.call, self.relay
        if leg.ended_in:  # §5.1: a half-closed stream takes no DATA (§5.4.1: the connection's)
            raise h2.ProtocolError(f"DATA on stream {leg.sid} after its END_STREAM")
        if end:
            leg.ended_in = True
        if call.finished or (call.up is None and call.held is None):
            return
        if data and call.over_limit(data, relay.door.max_message_bytes):
            limit = relay.door.max_message_bytes
            relay.end(call, "RESOURCE_EXHAUSTED", f"a request message is over {limit} bytes")
            return
        if call.up is None:  # held: its stream window bounds what waits here
            call.held.append((data, end, length))  # type: ignore[union-attr]
            return
        call.up.conn.send(call.up, h2.DATA, data, bool(end), length)

    def on_reset(self, leg: Leg, code: int) -> None:
        leg.ended_in = leg.ended_out = True
        self.relay.end(leg.call, "CANCELLED", "")

    def on_goaway(self, last_sid: int) -> None:
        self.going_away = True
        self.relay.close_if_idle(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.relay.clients.discard(self)
        for leg in list(self.legs.values()):
            leg.ended_in = leg.ended_out = True
            self.relay.end(leg.call, "CANCELLED", "")
        self.relay.flush()


class UpstreamConn(Conn):
    """The relay's connection to one replica's gRPC port, shared by all calls to it."""

    def __init__(self, relay: Relay, endpoint: Endpoint) -> None:
        super().__init__(relay)
        self.endpoint = endpoint
        self.decoder: BlockDecoder[tuple[bytes, str]] = BlockDecoder(_response_head)
        self.next_sid = 1
        self.draining = False
        self.connected = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.closed:  # retired while connecting, with no call left on it
            transport.close()
            return
        self.connected = True
        self._out.insert(0, _UPSTREAM_SETTINGS)
        self.flush()

    def flush(self) -> None:
        if self.connected:
            super().flush()

    def attach(self, call: Call) -> Leg:
        leg = Leg(call, self, self.next_sid)
        self.next_sid += 2
        self.legs[leg.sid] = leg
        if self.next_sid > h2.MAX_WINDOW - 2:
            self.relay.retire(self)
        return leg

    def on_headers(self, sid: int, block: bytes, end: int) -> None:
        forward, code = self.decoder.decode(block)
        leg = self.legs.get(sid)
        if leg is None:
            return
        call = leg.call
        if end:
            leg.ended_in = True
            call.code = code
        else:
            call.headers_sent = True
        call.down.conn.send(call.down, h2.HEADERS, forward, bool(end))

    def on_data(self, leg: Leg, data: Bytes, end: int, length: int) -> None:
        if end:
            leg.ended_in = True
        call = leg.call
        call.down.conn.send(call.down, h2.DATA, data, bool(end), length)

    def on_reset(self, leg: Leg, code: int) -> None:
        answered = leg.ended_in
        leg.ended_in = leg.ended_out = True
        if answered:  # after its trailers (RFC 9113 §8.1): it wants no more of the request
            self.drop(leg)
            return
        call = leg.call
        if not call.finished:
            name = h2.RESET_CODES.get(code, "INTERNAL")
            self.relay.end(call, name, f"the replica reset the stream (HTTP/2 error {code})")

    def on_goaway(self, last_sid: int) -> None:
        self.relay.retire(self)
        for sid, leg in list(self.legs.items()):
            if sid > last_sid:  # never seen by the replica
                self.relay.end(leg.call, "UNAVAILABLE", "the replica is shutting down")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.relay.retire(self)
        lost = [leg.call for leg in self.legs.values() if not leg.call.finished]
        for call in lost:
            self.relay.end(call, "UNAVAILABLE", "the replica closed the connection")
        if lost:
            self.relay.door.unreachable(self.endpoint)
        self.relay.flush()

    def fail(self, why: str) -> None:
        super().fail(why)
        self.relay.retire(self)


def _response_head(fields: Fields) -> tuple[bytes, str]:
    """A replica's response headers or trailers as sent on to the caller, and the call's
    gRPC status name (``OK`` when there is none yet)."""
    status = dict(fields).get(b"grpc-status", b"")
    code = h2.GRPC_NAMES.get(int(status) if status.isdigit() else 2, "UNKNOWN")
    return h2.block((k.decode("latin-1"), v) for k, v in fields), code


class Deadlines:
    """Calls' deadlines in slots of :data:`SLOT_S`, one timer per slot rather than one per
    call: a call costs a set insert and discard, never a timer of its own. A call expires
    up to one slot late. A slot's timer is
    cancelled when its last call ends, so none is left once calls stop."""

    SLOT_S = 0.01

    def __init__(self, expire: Callable[[Call], None]) -> None:
        self.expire = expire
        self._loop: asyncio.AbstractEventLoop | None = None
        self.slots: dict[int, tuple[set[Call], asyncio.TimerHandle]] = {}

    def add(self, call: Call, timeout_s: float) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        slot = int((loop.time() + timeout_s) / self.SLOT_S) + 1
        held = self.slots.get(slot)
        if held is None:
            held = self.slots[slot] = (set(), loop.call_at(slot * self.SLOT_S, self._due, slot))
        held[0].add(call)
        call.deadline = slot

    def remove(self, call: Call) -> None:
        slot = call.deadline
        if slot is None:
            return
        call.deadline = None
        calls, timer = self.slots[slot]
        calls.discard(call)
        if not calls:
            timer.cancel()
            del self.slots[slot]

    def _due(self, slot: int) -> None:
        calls, _ = self.slots.pop(slot)
        for call in calls:
            call.deadline = None
            self.expire(call)


# -- the relay --------------------------------------------------------------------------------


class Relay:
    """The door's connections and calls; one per gateway process."""

    def __init__(self, door: Door, connect_timeout_s: float, *, yield_at: int = 0) -> None:
        self.door = door
        self.connect_timeout_s = connect_timeout_s
        self.yield_at = yield_at  # see cedes_cpu
        self.clients: set[ClientConn] = set()
        self.upstreams: dict[Endpoint, UpstreamConn] = {}
        self.retired: set[UpstreamConn] = set()
        self.dirty: list[Conn] = []
        self.deadlines = Deadlines(self._expired)
        self.calls = 0  # in progress
        self.idle = asyncio.Event()
        self.idle.set()
        self._tasks: set[asyncio.Task[None]] = set()

    def flush(self) -> None:
        while self.dirty:
            dirty, self.dirty = self.dirty, []
            for conn in dirty:
                conn.flush()

    # -- calls ------------------------------------------------------------------------------

    def open(self, client: ClientConn, sid: int, head: CallHead, end: bool) -> None:
        """A new stream from a caller: admit it and splice it to a replica, or answer it."""
        try:
            if head.problem:
                raise Refusal("INVALID_ARGUMENT", head.problem)
            entry = self.door.admit(head)
        except Refusal as refusal:
            call = self._track(Call(client, sid, None, refusal.service), end)
            self.end(call, refusal.code, refusal.details)
            return
        except Asleep as asleep:
            call = self._track(Call(client, sid, None, asleep.entry.service), end)
            call.held = []
            self._spawn(self._wake(call, head, asleep.entry))
            return
        self._splice(self._track(Call(client, sid, entry), end), head, entry)

    async def _wake(self, call: Call, head: CallHead, asleep: ServiceRoute) -> None:
        """Hold ``call`` until its service has a ready replica, then admit it again and
        send on what the caller sent meanwhile."""
        try:
            await self.door.wake(asleep)
            entry = self.door.admit(head)
        except Refusal as refusal:
            self.end(call, refusal.code, refusal.details)
        except Asleep:
            self.end(call, "UNAVAILABLE", f"service {call.service!r} has no ready replica yet")
        else:
            if call.finished:  # the caller gave up meanwhile
                entry.in_flight.leave()
                return
            call.entry = entry
            self._splice(call, head, entry)
            held, call.held = call.held or [], None
            assert call.up is not None
            for data, end, length in held:
                call.up.conn.send(call.up, h2.DATA, data, bool(end), length)
        self.flush()

    def _splice(self, call: Call, head: CallHead, entry: ServiceRoute) -> None:
        """Send an admitted call on to a replica of ``entry``."""
        endpoint = call.endpoint = self.door.choose(entry)
        endpoint.outstanding += 1
        timeout, ours = deadline_s(entry.timeout_s, head.timeout_s)
        call.timeout_s, call.ours = timeout, ours
        self.deadlines.add(call, timeout)
        up = self.upstream(endpoint)
        call.up = leg = up.attach(call)
        # The caller's grpc-timeout passes as sent; the route's own is kept here (on expiry
        # the replica's stream is reset, which ends its work as a deadline would).
        up.send(leg, h2.HEADERS, head.upstream_block, call.down.ended_in and not call.held)

    def _track(self, call: Call, end: bool) -> Call:
        call.down.ended_in = end
        call.down.conn.legs[call.down.sid] = call.down
        self.calls += 1
        self.idle.clear()
        return call

    def _expired(self, call: Call) -> None:
        message = (
            f"the replica did not answer within {call.timeout_s * 1000:.0f} ms"
            if call.ours
            else "Deadline Exceeded"
        )
        self.end(call, "DEADLINE_EXCEEDED", message)
        self.flush()

    def end(self, call: Call, code: str, message: str) -> None:
        """End ``call`` with the relay's own status (a refusal, a limit, a lost replica)."""
        if call.finished:
            return
        down = call.down
        down.pending.clear()
        if not down.ended_out:
            call.code = code
            block = h2.grpc_status_block(code, message, headers_sent=call.headers_sent)
            down.conn.send(down, h2.HEADERS, block, True)  # calls sent_end → finish
        if not call.finished:
            self.finish(call, code)

    def sent_end(self, leg: Leg) -> None:
        """The relay ended its side of ``leg``'s stream; the call ends with its answer."""
        call = leg.call
        if leg is call.down and not call.finished:
            self.finish(call, call.code)

    def finish(self, call: Call, code: str) -> None:
        call.finished = True
        self.deadlines.remove(call)
        down, up = call.down, call.up
        if not down.ended_in and not down.conn.closed:
            down.conn.write(h2.rst_stream(down.sid, h2.NO_ERROR))
        down.conn.drop(down)
        if up is not None:
            if not (up.ended_in and up.ended_out) and not up.conn.closed:
                up.conn.write(h2.rst_stream(up.sid, h2.CANCEL))
            up.conn.drop(up)
            if isinstance(up.conn, UpstreamConn) and up.conn in self.retired:
                self._close_if_done(up.conn)
        if call.endpoint is not None:
            call.endpoint.outstanding -= 1
        self.door.ended(call, code)
        self.calls -= 1
        if not self.calls:
            self.idle.set()
        if isinstance(down.conn, ClientConn) and down.conn.going_away:
            self.close_if_idle(down.conn)

    # -- replicas' connections ---------------------------------------------------------------

    def upstream(self, endpoint: Endpoint) -> UpstreamConn:
        conn = self.upstreams.get(endpoint)
        if conn is None or len(conn.legs) >= conn.peer_max_streams:
            fresh = UpstreamConn(self, endpoint)
            if conn is not None:
                # The replica takes no more streams on it at once (it would refuse them):
                # its calls finish there and new ones go on a new connection, which expects
                # the same limit until its own SETTINGS come.
                self.retire(conn)
                fresh.peer_max_streams = conn.peer_max_streams
            conn = self.upstreams[endpoint] = fresh
            self._spawn(self._connect(conn))
        return conn

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: UpstreamConn) -> None:
        loop = asyncio.get_running_loop()
        endpoint = conn.endpoint
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: conn, endpoint.host, endpoint.port),
                self.connect_timeout_s,
            )
        except (TimeoutError, OSError):
            conn.closed = True
            self.retire(conn)
            for leg in list(conn.legs.values()):
                message = f"cannot connect to the replica {endpoint.base_url}"
                self.end(leg.call, "UNAVAILABLE", message)
            self.door.unreachable(endpoint)
            self.flush()

    def retire(self, conn: UpstreamConn) -> None:
        """No new calls on ``conn``; it closes once its calls are over."""
        if self.upstreams.get(conn.endpoint) is conn:
            del self.upstreams[conn.endpoint]
        if not conn.closed:
            self.retired.add(conn)
            self._close_if_done(conn)

    def _close_if_done(self, conn: UpstreamConn) -> None:
        if not conn.legs:
            self.retired.discard(conn)
            if conn.transport is not None and not conn.closed:
                conn.write(h2.goaway(0, h2.NO_ERROR))
                conn.flush()
                conn.transport.close()
            conn.closed = True

    def release(self, endpoints: list[Endpoint]) -> None:
        """Replicas no route lists any more: their connections close after their calls."""
        for endpoint in endpoints:
            conn = self.upstreams.get(endpoint)
            if conn is not None:
                self.retire(conn)

    def close_if_idle(self, client: ClientConn) -> None:
        if not client.legs and client.transport is not None:
            client.flush()
            client.transport.close()

    async def close(self, grace_s: float) -> None:
        """Stop taking calls, give those in progress ``grace_s``, then hang up."""
        for client in list(self.clients):
            client.going_away = True
            client.write(h2.goaway(client.last_sid, h2.NO_ERROR))
            self.close_if_idle(client)
        self.flush()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.idle.wait(), grace_s)
        for client in list(self.clients):
            if client.transport is not None:
                client.transport.close()
        for conn in [*self.upstreams.values(), *self.retired]:
            if conn.transport is not None:
                conn.transport.close()
            conn.closed = True
        self.upstreams.clear()
        self.retired.clear()
        for task in list(self._tasks):
            task.cancel()
