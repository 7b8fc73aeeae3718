"""The pull's lean HTTP/1.1 GET client (processors.storage.http_get): what a server may send
on the wire, read as ``requests`` would; connections reused only when that is safe. Against
the OSS stand-in (through ``oss2``) and a scripted socket server for what it never sends."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from processors.storage import PermanentStorageError, TemporaryStorageError
from processors.storage.http_get import Connections, IncompleteBody, ProtocolError, with_query
from processors.storage.oss import OssBucket, RemoteObject
from processors.storage.uri import OssLocation
from testing.oss_server import OssServer
from tests.fixtures_oss import BUCKET, oss_bucket

HANG_UP = b"<hang up>"  # at the end of an answer: the server closes the connection after it


class Scripted:
    """A server answering each request (read up to its blank line) with the next of
    ``answers`` (``b""``: hangs up instead), over TLS with ``tls``. Counts connections,
    keeps the requests."""

    def __init__(self, answers: list[bytes], tls: ssl.SSLContext | None = None) -> None:
        self.answers = iter(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        where = "https://localhost" if tls else "http://127.0.0.1"  # the certificate's name
        self.url = f"{where}:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if self._tls is not None:
                try:
                    conn = self._tls.wrap_socket(conn, server_side=True)
                except OSError:  # a client that did not trust it
                    conn.close()
                    continue
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f:
            while True:
                head = b""
                while (line := f.readline()) not in (b"\r\n", b""):
                    head += line
                if not head:
                    return
                self.requests.append(head)
                answer = next(self.answers, b"")
                conn.sendall(answer.removesuffix(HANG_UP))
                if not answer or answer.endswith(HANG_UP):
                    return

    def close(self) -> None:
        self._listener.close()


Script = Callable[..., Scripted]  # the fixture: a server for these answers


@pytest.fixture
def scripted() -> Iterator[Script]:
    made: list[Scripted] = []

    def make(answers: list[bytes], tls: ssl.SSLContext | None = None) -> Scripted:
        made.append(Scripted(answers, tls))
        return made[-1]

    yield make
    for server in made:
        server.close()


def ok(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


def test_bodies_by_length_by_chunks_and_to_the_end(scripted: Script) -> None:
    server = scripted(
        [
            ok(b"hello", "x-oss-request-id: R1"),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nTrailer: t\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end" + HANG_UP,
        ]
    )
    gets = Connections(4)
    first = gets.get(f"{server.url}/b/k", {"a": "1"}, 5)
    assert (first.status, first.request_id, first.read()) == (200, "R1", b"hello")
    assert first.read() == b""
    chunked = gets.get(f"{server.url}/b/k", {}, 5)
    assert [chunked.read(2), chunked.read(), chunked.read()] == [b"ab", b"cdefg", b""]
    to_end = gets.get(f"{server.url}/b/k", {}, 5)
    assert to_end.read() == b"until the end"
    assert server.connections == 1  # kept alive until the server said close
    host = server.url.removeprefix("http://")
    head = f"GET /b/k HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: identity\r\na: 1\r\n"
    assert server.requests[0] == head.encode()


def test_headers_folded_and_repeated_are_read_as_requests_does(
    scripted: Script,
) -> None:
    server = scripted([ok(b"", "X-A: 1", "x-a: 2", "X-Long: one", " two")])
    answer = Connections(1).get(f"{server.url}/k", {}, 5)
    assert (answer.headers["x-a"], answer.headers["X-LONG"]) == ("1, 2", "one two")


def test_readinto_fills_the_callers_buffer_and_stops_at_the_body(
    scripted: Script,
) -> None:
    server = scripted([ok(b"0123456789"), ok(b"next")])
    gets = Connections(1)
    answer = gets.get(f"{server.url}/k", {}, 5)
    buffer = bytearray(8)
    assert answer.readinto(memoryview(buffer)) == 8 and buffer == b"01234567"
    assert answer.readinto(memoryview(buffer)) == 2 and buffer[:2] == b"89"
    assert answer.readinto(memoryview(buffer)) == 0
    assert gets.get(f"{server.url}/k", {}, 5).read() == b"next"  # same connection
    assert server.connections == 1


def test_a_body_cut_short_reads_short_then_raises(scripted: Script) -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123" + HANG_UP
    server = scripted([cut, ok(b"again")])
    gets = Connections(1)
    answer = gets.get(f"{server.url}/k", {}, 5)
    assert answer.read(10) == b"0123"
    with pytest.raises(IncompleteBody):
        answer.read(10)
    assert gets.get(f"{server.url}/k", {}, 5).read() == b"again"
    assert server.connections == 2  # the cut one was not reused


def test_an_idle_connection_the_server_closed_is_replaced_once(
    scripted: Script,
) -> None:
    server = scripted([ok(b"one"), b"", ok(b"two")])  # hangs up on the second request
    gets = Connections(1)
    assert gets.get(f"{server.url}/k", {}, 5).read() == b"one"
    assert gets.get(f"{server.url}/k", {}, 5).read() == b"two"
    assert server.connections == 2


def test_a_new_connection_without_an_answer_is_an_error(scripted: Script) -> None:
    server = scripted([b""])
    with pytest.raises(ProtocolError, match="without an answer"):
        Connections(1).get(f"{server.url}/k", {}, 5)


@pytest.mark.parametrize(
    "answer",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    ],
)
def test_answers_that_are_not_http_it_reads(scripted: Script, answer: bytes) -> None:
    server = scripted([answer])
    with pytest.raises(ProtocolError):
        Connections(1).get(f"{server.url}/k", {}, 5)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost, and its key (made with ``cryptography``, a
    dependency, so that the HTTPS test never depends on an ``openssl`` command)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    where = tmp_path_factory.mktemp("tls")
    cert_path, key_path = where / "cert.pem", where / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_https_checks_the_certificate_and_keeps_the_connection(
    scripted: Script, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    server = scripted([ok(b"over tls"), ok(b"again")], served)
    trusting = ssl.create_default_context(cafile=str(cert))
    gets = Connections(1, trusting)
    assert gets.get(f"{server.url}/k", {}, 5).read() == b"over tls"
    assert gets.get(f"{server.url}/k", {}, 5).read() == b"again"
    assert server.connections == 1
    assert server.requests[0].startswith(b"GET /k HTTP/1.1\r\nHost: localhost:")
    with pytest.raises(ssl.SSLCertVerificationError):  # certifi's CAs do not know it
        Connections(1).get(f"{server.url}/k", {}, 5)


@pytest.mark.parametrize(
    ("url", "params"),
    [
        ("http://h/b/", {"list-type": "2", "prefix": "models/", "continuation-token": ""}),
        ("http://h/b/", {"prefix": "a b+c/é~_.-%&=?#", "delimiter": None, "acl": ""}),
        ("http://h/b/k?x=1", {"y": "2"}),
        ("http://h/b/k", {"gone": None}),
        ("http://h/b/k", {}),
    ],
)
def test_a_query_is_encoded_as_requests_encodes_it(url: str, params: dict[str, str | None]) -> None:
    prepared = requests.PreparedRequest()
    prepared.prepare_url(url, params)
    assert with_query(url, params) == prepared.url


def test_a_header_that_would_split_the_request_is_refused() -> None:
    with pytest.raises(ProtocolError, match="cannot be sent"):
        Connections(1).get("http://127.0.0.1:9/k", {"If-Match": '"e"\r\nX-Evil: 1'}, 5)


# -- through oss2, against the stand-in -----------------------------------------------------------
def stored(oss_server: OssServer, key: str, data: bytes) -> str:
    """Put ``data`` at ``key`` in the stand-in; its ETag."""
    oss_bucket(oss_server).put_object(key, data)
    return str(oss_bucket(oss_server).head_object(key).etag)


@pytest.fixture
def bucket(oss_server: OssServer, oss_env: dict[str, str]) -> OssBucket:
    return OssBucket(OssLocation(BUCKET, ""), endpoint=oss_server.endpoint)


def test_object_gets_take_the_lean_path_and_keep_one_connection(
    oss_server: OssServer, bucket: OssBucket
) -> None:
    key = f"lean-{uuid.uuid4().hex[:6]}"
    etag = stored(oss_server, key, b"abcdef")
    oss_server.reset()
    for _ in range(3):
        with bucket.open_range(key, 1, 3, etag) as body:
            assert (body.read(10), body.object_crc is not None) == (b"bcd", True)
    assert [c.status for c in oss_server.calls] == [206, 206, 206]
    gets = bucket._bucket.session.gets
    assert gets is not None and sum(map(len, gets._idle.values())) == 1


def test_a_listing_takes_the_lean_path_and_leaves_its_connection_to_the_gets(
    oss_server: OssServer, bucket: OssBucket
) -> None:
    """A pull's first request is its listing: the object GETs after it reuse its connection."""
    key = f"listed {uuid.uuid4().hex[:6]}/é+k"  # a prefix that must be encoded in the query
    etag = stored(oss_server, key, b"abc")
    listing = OssBucket(OssLocation(BUCKET, key.split("/")[0] + "/"), endpoint=bucket.endpoint)
    assert listing.list_page("")[0] == [RemoteObject(key, 3, etag)]
    gets = listing._bucket.session.gets
    assert gets is not None and sum(map(len, gets._idle.values())) == 1
    with listing.open_range(key, 0, 2, etag) as body:
        assert body.read(3) == b"abc"
    assert sum(map(len, gets._idle.values())) == 1
    assert "session" not in vars(listing._bucket.session)  # requests' never made


@pytest.mark.parametrize(
    ("fault", "error", "reason"),
    [
        ("missing", TemporaryStorageError, r"object changed during the pull \(NoSuchKey\)"),
        ("etag", TemporaryStorageError, r"changed during the pull \(PreconditionFailed\)"),
        ("denied", PermanentStorageError, "access denied: let this AccessKey list and read"),
        ("5xx", TemporaryStorageError, r"OSS answered 503 ServiceUnavailable \(request id"),
    ],
)
def test_oss_errors_on_the_lean_path_are_oss2s(
    oss_server: OssServer,
    bucket: OssBucket,
    fault: str,
    error: type[Exception],
    reason: str,
) -> None:
    key = good_key = f"err-{uuid.uuid4().hex[:6]}"
    etag = good_etag = stored(oss_server, key, b"abc")
    if fault == "missing":
        key += "-not-there"
    elif fault == "etag":
        etag = "0" * 32
    elif fault == "denied":
        oss_server.set_grants(BUCKET, {"someone-else": "read-write"})
    else:
        oss_server.fail_next(1)
    try:
        with pytest.raises(error, match=reason):
            bucket.open_range(key, 0, 2, etag)
    finally:
        oss_server.set_grants(BUCKET, None)
    with bucket.open_range(good_key, 0, 2, good_etag) as body:
        assert body.read(3) == b"abc"
    assert oss_server.calls[-1].status == 206


def test_a_cut_body_on_the_lean_path_is_a_broken_connection(
    oss_server: OssServer, bucket: OssBucket, tmp_path: Path
) -> None:
    key = f"cut-{uuid.uuid4().hex[:6]}"
    etag = stored(oss_server, key, b"x" * 1000)
    oss_server.drop_next(1, after=10)
    with bucket.open_range(key, 0, 999, etag) as body:
        assert len(body.read(1000)) == 10
        with pytest.raises(TemporaryStorageError, match=r"connection to OSS broke \(Incomplete"):
            body.read(1000)


def test_through_requests_a_body_reads_into_a_buffer_alike(
    oss_server: OssServer, bucket: OssBucket
) -> None:
    """Where a proxy applies, object GETs go through requests: read the same way."""
    key = f"req-{uuid.uuid4().hex[:6]}"
    etag = stored(oss_server, key, b"0123456789")
    bucket._bucket.session.gets = None  # as with a proxy
    buffer = bytearray(4)
    with bucket.open_range(key, 2, 8, etag) as body:
        assert body.readinto(memoryview(buffer)) == 4 and buffer == b"2345"
        assert body.readinto(memoryview(buffer)) == 3 and buffer[:3] == b"678"
        assert body.readinto(memoryview(buffer)) == 0
