"""A lean HTTP/1.1 client for the pull's GETs, kept-alive connections per origin.

:class:`processors.storage.oss._Transport` sends through :meth:`Connections.get` the GETs
``oss2`` built and signed (objects and listings: no body, no proxy; the query encoded by
:func:`with_query` as ``requests`` would); anything else still goes through ``requests``.
Through ``requests``, ``urllib3`` and ``http.client`` a small object's GET spends most of
its CPU in Python layers (URL parsing and re-quoting, header merging and validation,
``email``'s header parser, pool bookkeeping), more than the signing, and a pull's first
request there more again (its pool, a connection the object GETs could not reuse; the
figures: docs/performance.md): here the request is one write and the answer is parsed by
hand, and a big body can be read into the caller's buffer (:meth:`Response.readinto`).

It reads what HTTP/1.1 allows a server to send: a ``Content-Length`` body, a chunked one,
or one ending with the connection; obsolete folded header lines; repeated headers (joined
with ", " as ``requests`` does). A connection is reused only when its answer was read to
the end and neither side asked to close it, and a reused one that the server closed while
idle is replaced once (a GET is safe to send again). A body that ends early reads short
first, then raises :class:`IncompleteBody`, as ``urllib3`` does; every failure is an
``OSError``. Redirects are not followed (``requests`` would, but OSS never redirects a
signed GET to somewhere it would be accepted: the answer goes to ``oss2`` as it came).
"""

from __future__ import annotations

import io
import select
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlencode, urlsplit

if TYPE_CHECKING:  # ssl is imported where an https connection is made
    import ssl

_MAX_LINE = 65536  # as http.client: a longer status or header line is not HTTP we read
_MAX_HEADERS = 100
_BUFFER = 1 << 16  # the socket's read buffer: a small object's headers and body in one recv
_NO_BODY = frozenset({204, 304})


class ProtocolError(ConnectionError):
    """The server's answer is not HTTP/1.x this client reads (or it hung up before one)."""


class IncompleteBody(ConnectionError):
    """The connection ended before the body did."""


class Connections:
    """Idle connections per origin (``scheme://host:port``), at most ``pool_size`` each."""

    def __init__(self, pool_size: int, context: ssl.SSLContext | None = None) -> None:
        self._pool_size = pool_size
        self._context = context  # for https: made on first use if not given
        self._idle: dict[str, list[_Connection]] = {}
        self._lock = threading.Lock()

    def get(self, url: str, headers: Mapping[str, str | None], timeout: float) -> Response:
        """Send ``GET url`` with ``headers`` (a ``None`` value: not sent) and read the
        answer's head; the body is the :class:`Response`'s to read."""
        scheme, _, rest = url.partition("://")
        netloc, _, path = rest.partition("/")
        origin = f"{scheme}://{netloc}"
        head = _request_head(f"/{path}", _host_header(scheme, netloc), headers)
        idle = self._idle.get(origin)
        if idle is None:
            with self._lock:
                idle = self._idle.setdefault(origin, [])

        def release(conn: _Connection) -> None:
            if len(idle) < self._pool_size:
                idle.append(conn)  # list.append and pop are atomic: no lock per request
            else:
                conn.close()

        while (conn := _take(idle)) is not None:
            try:
                return conn.request(head, release, reused=True)
            except _Stale:
                continue  # closed by the server while idle, before it could tell: the next
        return _Connection(scheme, netloc, timeout, self._https_context).request(
            head, release, reused=False
        )

    def _https_context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = _default_context()
        return self._context


def with_query(url: str, params: Mapping[str, str | None]) -> str:
    """``url`` with ``params`` added to its query as ``requests`` adds them: form-encoded
    (a space as ``+``, every other byte but letters, digits and ``_.-~`` as ``%XX``), in
    their order, a ``None`` value left out, an empty one kept (``acl=``)."""
    query = urlencode([(name, value) for name, value in params.items() if value is not None])
    if not query:
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


def _default_context() -> ssl.SSLContext:
    """What ``requests`` verifies OSS's certificate with: urllib3's defaults and certifi's
    CA bundle (its ``verify=True``; the session ignores ``REQUESTS_CA_BUNDLE`` as the pull's
    does not trust the environment)."""
    import certifi
    from urllib3.util.ssl_ import create_urllib3_context

    context = create_urllib3_context()
    context.load_verify_locations(certifi.where())
    return context


def _take(idle: list[_Connection]) -> _Connection | None:
    while idle:
        try:
            conn = idle.pop()
        except IndexError:  # another thread took the last one
            return None
        if conn.fresh():
            return conn
        conn.close()
    return None


def _host_header(scheme: str, netloc: str) -> str:
    """``netloc`` without the scheme's default port, as http.client sends it."""
    default = ":443" if scheme == "https" else ":80"
    return netloc.removesuffix(default)


def _request_head(target: str, host: str, headers: Mapping[str, str | None]) -> bytes:
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}"]
    if "accept-encoding" not in {k.lower() for k, v in headers.items() if v is not None}:
        lines.append("Accept-Encoding: identity")  # what http.client adds: never compressed
    for name, value in headers.items():
        if value is None:
            continue
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise ProtocolError(f"header {name!r} cannot be sent")
        lines.append(f"{name}: {value}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


class _Stale(Exception):
    """A connection that gave no byte of an answer: closed or reset while idle."""


class _Connection:
    def __init__(
        self, scheme: str, netloc: str, timeout: float, context: Callable[[], ssl.SSLContext]
    ) -> None:
        url = urlsplit(f"{scheme}://{netloc}")
        host, tls = url.hostname or "", scheme == "https"
        sock = socket.create_connection((host, url.port or (443 if tls else 80)), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as urllib3 does
            if tls:
                sock = context().wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.file = cast(io.BufferedReader, sock.makefile("rb", buffering=_BUFFER))

    def fresh(self) -> bool:
        """Nothing to read on an idle connection (else the server closed it, or sent what
        no request asked for): fit to send on."""
        pending = getattr(self.sock, "pending", None)  # an ssl socket's already decrypted bytes
        if pending is not None and pending():
            return False
        try:
            return not select.select([self.sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def request(
        self, head: bytes, release: Callable[[_Connection], None], *, reused: bool
    ) -> Response:
        """Send ``head`` and read the answer's head. On a ``reused`` connection that gives
        no byte of an answer, :class:`_Stale`."""
        try:
            try:
                self.sock.sendall(head)
                line = self.file.readline(_MAX_LINE + 1)
            except (ConnectionResetError, BrokenPipeError) as e:
                if reused:
                    raise _Stale from e
                raise
            if not line:
                if reused:
                    raise _Stale
                raise ProtocolError("the server closed the connection without an answer")
            return Response(self, line, release)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class Response:
    """The answer to one GET, as ``oss2`` reads its ``session``'s responses: ``status``,
    ``headers``, ``request_id``, :meth:`read`, and ``response.close()``."""

    def __init__(
        self, conn: _Connection, status_line: bytes, release: Callable[[_Connection], None]
    ) -> None:
        self._conn: _Connection | None = conn
        self._file = conn.file
        self._release = release
        version, status = [*status_line.split(None, 2), b"", b""][:2]
        if not version.startswith(b"HTTP/1.") or len(status) != 3 or not status.isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        self.status = int(status)
        self.headers = _read_headers(self._file)
        self.request_id: str = self.headers.get("x-oss-request-id", "")
        self.response = self  # oss2's GetObjectResult.close() closes resp.response
        connection = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        self._keep = (
            "keep-alive" in connection if version == b"HTTP/1.0" else "close" not in connection
        )
        self._chunked = False
        self._chunk_left: int | None = 0  # of the current chunk; None once the last was read
        self._left: int | None = None  # body bytes still to come; None: until the end
        coding = self.headers.get("transfer-encoding", "").lower()
        if self.status in _NO_BODY or self.status < 200:
            self._left = 0
        elif coding:
            if coding.rsplit(",", 1)[-1].strip() != "chunked":
                raise ProtocolError(f"unsupported Transfer-Encoding {coding!r}")
            self._chunked, self._left = True, 0
        elif "content-length" in self.headers:
            lengths = {v.strip() for v in self.headers["content-length"].split(",")}
            (length,) = lengths if len(lengths) == 1 else (None,)
            if length is None or not length.isdigit():
                raise ProtocolError(f"bad Content-Length {self.headers['content-length']!r}")
            self._left = int(length)
        else:
            self._keep = False  # the body ends with the connection
        if not self._chunked and self._left == 0:
            self._finish()

    def read(self, amt: int | None = None) -> bytes:
        """Up to ``amt`` bytes of the body (all of it without), ``b""`` at its end."""
        if self._conn is None or amt == 0:
            return b""
        if self._chunked:
            return self._read_chunked(amt)
        want = self._left if amt is None or (self._left is not None and amt > self._left) else amt
        try:
            data = self._file.read(want) if want is not None else self._file.read()
        except BaseException:
            self._abandon()
            raise
        self._count(len(data), want)
        return data

    def readinto(self, buffer: memoryview) -> int:
        """Fill ``buffer`` (its length at most: less only at the body's end) with the
        body's next bytes, without a copy in between: their count, 0 at the end."""
        if self._conn is None or not len(buffer):
            return 0
        if self._chunked:  # never for an object from OSS: through read()
            data = self.read(len(buffer))
            buffer[: len(data)] = data
            return len(data)
        if self._left is not None and len(buffer) > self._left:
            buffer = buffer[: self._left]
        try:
            n = self._file.readinto(buffer)
        except BaseException:
            self._abandon()
            raise
        self._count(n, len(buffer))
        return n

    def close(self) -> None:
        """Give the connection back if the body was read to its end, else hang up."""
        self._abandon()

    def __iter__(self) -> Iterator[bytes]:
        return iter(lambda: self.read(_BUFFER), b"")

    def _count(self, got: int, wanted: int | None) -> None:
        if self._left is None:  # the body ends with the connection
            if wanted is None or not got:
                self._keep = False
                self._finish()
            return
        self._left -= got
        if self._left == 0:
            self._finish()
        elif not got:
            self._abandon()
            raise IncompleteBody(f"the connection ended {self._left} bytes before the body")

    def _read_chunked(self, amt: int | None) -> bytes:
        out = bytearray()
        try:
            while amt is None or len(out) < amt:
                if not self._chunk_left and (self._chunk_left is None or not self._next_chunk()):
                    break
                assert self._chunk_left is not None
                want = self._chunk_left if amt is None else min(amt - len(out), self._chunk_left)
                data = self._file.read(want)
                if len(data) < want:
                    raise IncompleteBody("the connection ended inside a chunk")
                out += data
                self._chunk_left -= len(data)
                if not self._chunk_left:
                    self._expect(b"\r\n")
        except BaseException:
            self._abandon()
            raise
        return bytes(out)

    def _next_chunk(self) -> bool:
        """Read a chunk's size line: whether it has bytes (else the trailers are read and
        the body is done)."""
        line = self._file.readline(_MAX_LINE + 1)
        if not line.endswith(b"\n"):
            raise IncompleteBody("the connection ended before a chunk")
        size = line.split(b";", 1)[0].strip()
        try:
            self._chunk_left = int(size, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {size[:20]!r}") from None
        if self._chunk_left:
            return True
        self._chunk_left = None
        _read_headers(self._file)  # trailers, not kept
        self._finish()
        return False

    def _expect(self, what: bytes) -> None:
        if self._file.read(len(what)) != what:
            raise ProtocolError("a chunk did not end where its size said")

    def _finish(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._keep:
            self._release(conn)
        elif conn is not None:
            conn.close()

    def _abandon(self) -> None:
        """Before the body's end: the connection holds unread bytes, it cannot be reused."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class Headers(MutableMapping[str, str]):
    """A response's headers, by name in any case (as ``requests``' ``CaseInsensitiveDict``,
    which ``oss2`` reads them with), kept by their lower-case name."""

    def __init__(self) -> None:
        self._by_name: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        return self._by_name[name.lower()]

    def __setitem__(self, name: str, value: str) -> None:
        self._by_name[name.lower()] = value

    def __delitem__(self, name: str) -> None:
        del self._by_name[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_name

    def get(self, name: str, default: Any = None) -> Any:
        return self._by_name.get(name.lower(), default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return repr(self._by_name)


def _read_headers(file: Any) -> Headers:
    headers = Headers()
    last = ""
    for _ in range(_MAX_HEADERS + 1):
        line = file.readline(_MAX_LINE + 1)
        if line in (b"\r\n", b"\n"):
            return headers
        if not line.endswith(b"\n"):
            raise ProtocolError("the connection ended in the headers (or a line too long)")
        text = line.decode("latin-1")
        if text[0] in " \t" and last:  # an obsolete folded line continues the last header
            headers[last] += " " + text.strip()
            continue
        name, colon, value = text.partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"not a header line: {line[:80]!r}")
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
        last = name
    raise ProtocolError(f"more than {_MAX_HEADERS} headers")
