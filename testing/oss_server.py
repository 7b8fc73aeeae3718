"""A local Alibaba Cloud OSS stand-in that the unmodified ``oss2`` SDK talks to.

Used by ``tests/fixtures_oss.py`` (the ``oss_server`` fixture) and by ``bench/pull.py`` (as a
subprocess: ``python -m testing.oss_server --access-key-id ID --access-key-secret S --bucket B``
prints ``endpoint http://127.0.0.1:<port>`` and serves until terminated).

It speaks OSS's REST protocol path-style (``/<bucket>/<key>``, which is what ``oss2`` sends to
an IP endpoint) over HTTP/1.1 keep-alive on 127.0.0.1, objects kept on disk, and is as strict as
OSS where a client could get it wrong:

* V1 (``OSS ak:signature``) and V4 (``OSS4-HMAC-SHA256``) header signatures, recomputed from
  the request as received, with the 15-minute clock-skew limit; STS ``x-oss-security-token``;
  per-bucket ACLs (grants per AccessKey, ``public-read`` for anonymous reads).
* Errors as OSS formats them: XML ``Error`` with ``Code``, ``Message``, ``RequestId``, ``HostId``
  (plus ``StringToSign``/``OSSAccessKeyId``/``Key``/``BucketName`` where OSS adds them), an
  ``x-oss-request-id`` header, and on HEAD the XML base64-encoded in ``x-oss-err`` with an
  empty body: SignatureDoesNotMatch, InvalidAccessKeyId, RequestTimeTooSkewed, AccessDenied,
  NoSuchBucket, NoSuchKey, PreconditionFailed, InvalidArgument, InvalidDigest.
* PutObject (Content-Length or chunked body; Content-MD5 checked), GetObject (single
  ``Range``, 206 + ``Content-Range``; an unsatisfiable range returns the whole object unless
  ``x-oss-range-behavior: standard`` asks for 416; ``If-Match``/``If-None-Match`` with ETag
  lists and ``*``), HeadObject,
  DeleteObject, ListObjects (V1 marker paging) and ListObjectsV2 (prefix, delimiter, max-keys,
  start-after, continuation-token, fetch-owner, ``encoding-type=url``); ``ETag``,
  ``Last-Modified``, ``Content-Length`` and ``x-oss-hash-crc64ecma`` (whole-object CRC64, also
  on ranged GETs). Buckets are made with :meth:`OssServer.create_bucket`, not over HTTP.
* Objects as a multipart upload leaves them (:meth:`OssServer.put` with ``parts``): ETag
  ``<MD5 of the parts' MD5s>-<N>``, type ``Multipart`` in headers and listings; and
  :meth:`OssServer.put` stores many objects fast (listings longer than one 1000-key page).
* Knobs for tests: :meth:`OssServer.before_next` (run another writer's change, e.g. replace
  the object, just before a request is served), :meth:`OssServer.fail_next` (5xx),
  :meth:`OssServer.drop_next` (close the
  connection mid-body), :meth:`OssServer.corrupt_next` (flip a body byte),
  :attr:`OssServer.first_byte_s` (OSS's per-request latency, ``--first-byte-ms``),
  :attr:`OssServer.crc_headers` (omit CRC64 headers), and counters per key
  (:meth:`OssServer.requests_for`, :meth:`OssServer.bytes_served`, :attr:`OssServer.calls`).

Not covered (refused with a 400, or simply not checked): V2 (``OSS2``) signatures, presigned
URLs and POST-policy uploads; virtual-hosted-style addressing, CNAMEs, HTTPS; bucket creation
and deletion over HTTP, the multipart upload API itself (InitiateMultipartUpload, UploadPart,
Complete...: only its result is modeled), append, copy, symlinks, versioning, tagging,
lifecycle, bucket ACL/policy APIs, RAM policies, ListBuckets; storage classes and restore;
server-side encryption; ``response-*`` header overrides; multi-range GETs; request-payer,
traffic limits, QoS; OSS's ``EC`` error sub-codes; non-ASCII header values; Expect/100-continue.
Wrong-region V4 signatures fail as SignatureDoesNotMatch (the key is derived for this server's
region). Security tokens are opaque strings compared exactly (no expiry).
"""

from __future__ import annotations

import argparse
import base64
import email.utils
import hashlib
import hmac
import json
import secrets
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from xml.sax.saxutils import escape

import oss2.utils

MAX_SKEW_SECONDS = 15 * 60
_CHUNK = 1 << 20
_SLOW_PIECE = 64 << 10  # a "slow" body goes out in pieces this big, paced

# Query parameters OSS's V1 signature covers (the "sub-resources" of its signing doc).
_SUBRESOURCE_NAMES = """
acl uploads location cors logging website referer lifecycle delete append tagging objectMeta
uploadId partNumber security-token position img style styleName replication replicationProgress
replicationLocation cname bucketInfo comp qos live status vod startTime endTime symlink
x-oss-process response-content-type x-oss-traffic-limit response-content-language
response-expires response-cache-control response-content-disposition response-content-encoding
udf udfName udfImage udfId udfImageDesc udfApplication udfApplicationLog restore callback
callback-var qosInfo policy stat encryption versions versioning versionId requestPayment
x-oss-request-payer sequential inventory inventoryId continuation-token asyncFetch worm wormId
wormExtend withHashContext x-oss-enable-md5 x-oss-enable-sha1 x-oss-enable-sha256
x-oss-hash-ctx x-oss-md5-ctx transferAcceleration regionList cloudboxes x-oss-ac-source-ip
x-oss-ac-subnet-mask x-oss-ac-vpc-id x-oss-ac-forward-allow metaQuery resourceGroup rtc
x-oss-async-process responseHeader
"""
_SUBRESOURCES = frozenset(_SUBRESOURCE_NAMES.split())
_MESSAGES = {
    "AccessDenied": "You have no right to access this object because of bucket acl.",
    "InvalidAccessKeyId": "The OSS Access Key Id you provided does not exist in our records.",
    "SignatureDoesNotMatch": "The request signature we calculated does not match the "
    "signature you provided. Check your key and signing method.",
    "RequestTimeTooSkewed": "The difference between the request time and the current time "
    "is too large.",
    "NoSuchBucket": "The specified bucket does not exist.",
    "NoSuchKey": "The specified key does not exist.",
    "PreconditionFailed": "At least one of the pre-conditions you specified did not hold.",
    "InternalError": "We encountered an internal error. Please try again.",
    "ServiceUnavailable": "Please reduce your request rate.",
}


class OssError(Exception):
    """An OSS error reply: status, code, message and extra ``Error`` child elements."""

    def __init__(self, status: int, code: str, message: str = "", **extra: str) -> None:
        super().__init__(code)
        self.status, self.code = status, code
        self.message = message or _MESSAGES.get(code, code)
        self.extra = extra


@dataclass
class Call:
    """One request as the server saw it (what tests assert on). Recorded as its status line is
    sent and ``sent`` counted before the bytes go out, so a client that got an answer can
    assert on it at once."""

    method: str
    bucket: str
    key: str
    range: str | None
    status: int = 0
    sent: int = 0  # body bytes written to the socket


@dataclass
class _Fault:
    kind: str  # "fail" | "drop" | "corrupt" | "slow" | "before"
    remaining: int
    status: int = 503
    after: int = 0
    rate: float = 0.0  # bytes/s, for "slow"
    match: Callable[[Call], bool] | None = None
    action: Callable[[], object] | None = None  # "before": run ahead of the request


@dataclass
class _Object:
    path: Path
    size: int
    etag: str
    crc: int
    mtime: float
    content_type: str
    type: str = "Normal"  # "Multipart" when uploaded in parts (its ETag is not an MD5)


@dataclass
class _Bucket:
    name: str
    acl: str  # "private" | "public-read"
    grants: dict[str, str] | None  # access key id -> "read" | "read-write"; None: every key
    objects: dict[str, _Object] = field(default_factory=dict)


class OssServer:
    """The stand-in; ``with OssServer() as s:`` or :meth:`start`/:meth:`stop`."""

    def __init__(self, *, region: str = "cn-hangzhou", root: Path | None = None) -> None:
        self.region = region
        self.crc_headers = True
        # Seconds before each answer, as OSS's first-byte latency (a few ms in-region):
        # the benchmarks measure what parallel fetching hides, which a loopback has not.
        self.first_byte_s = 0.0
        self.calls: list[Call] = []
        self._credentials: dict[str, tuple[str, str | None]] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._tmp = None if root else tempfile.TemporaryDirectory(prefix="oss-stand-in-")
        self._root = root or Path(self._tmp.name)  # type: ignore[union-attr]
        self._http = _HttpServer(("127.0.0.1", 0), _Handler)
        self._http.oss = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def start(self) -> OssServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        if self._tmp:
            self._tmp.cleanup()

    def __enter__(self) -> OssServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- set-up ---------------------------------------------------------------------------------
    def add_credential(self, key_id: str, secret: str, token: str | None = None) -> None:
        """Register an AccessKey; with ``token`` it is an STS key that must send that token."""
        self._credentials[key_id] = (secret, token)

    def create_bucket(
        self, name: str, *, acl: str = "private", grants: Mapping[str, str] | None = None
    ) -> None:
        """``grants`` maps key ids to "read" or "read-write"; ``None`` lets every key in."""
        with self._lock:
            self._buckets[name] = _Bucket(name, acl, None if grants is None else dict(grants))

    def set_grants(self, bucket: str, grants: Mapping[str, str] | None) -> None:
        with self._lock:
            self._buckets[bucket].grants = None if grants is None else dict(grants)

    def put(self, bucket: str, key: str, data: bytes, *, parts: int = 0) -> str:
        """Store an object directly, not over HTTP (fast, for many keys); returns its
        ETag. With ``parts`` it is stored as a multipart upload of that many equal parts
        would leave it: ETag ``<MD5 of the parts' MD5s>-<parts>`` (upper-case hex, not the
        content's MD5) and object type ``Multipart``."""
        path = self._new_path()
        path.write_bytes(data)
        bucket_ = self._bucket(bucket)
        return self._store(bucket_, key, path, "application/octet-stream", None, parts).etag

    def before_next(
        self, action: Callable[[], object], n: int = 1, match: Callable[[Call], bool] | None = None
    ) -> None:
        """Run ``action`` (another writer, e.g. :meth:`put` replacing the object) just
        before the next ``n`` (matching) requests are served."""
        self._add_fault(_Fault("before", n, match=match, action=action))

    # -- faults ---------------------------------------------------------------------------------
    def fail_next(
        self, n: int = 1, status: int = 503, match: Callable[[Call], bool] | None = None
    ) -> None:
        """Answer the next ``n`` (matching) requests with a 5xx error, before any checks."""
        self._add_fault(_Fault("fail", n, status=status, match=match))

    def drop_next(
        self, n: int = 1, after: int = 0, match: Callable[[Call], bool] | None = None
    ) -> None:
        """Close the connection after ``after`` body bytes of the next ``n`` (matching) GETs."""
        self._add_fault(_Fault("drop", n, after=after, match=match))

    def corrupt_next(self, n: int = 1, match: Callable[[Call], bool] | None = None) -> None:
        """Flip the first body byte of the next ``n`` (matching) GETs."""
        self._add_fault(_Fault("corrupt", n, match=match))

    def slow_next(
        self, n: int = 1, rate: float = 1e6, match: Callable[[Call], bool] | None = None
    ) -> None:
        """Send the body of the next ``n`` (matching) GETs at about ``rate`` bytes/s (a big
        object on a slow link, for progress reports)."""
        self._add_fault(_Fault("slow", n, rate=rate, match=match))

    def reset(self) -> None:
        """Forget faults and counters, restore CRC headers (between tests)."""
        with self._lock:
            self._faults.clear()
            self.calls.clear()
        self.crc_headers = True

    # -- counters -------------------------------------------------------------------------------
    def requests_for(self, key: str, method: str = "GET") -> int:
        with self._lock:
            return sum(1 for c in self.calls if c.key == key and c.method == method)

    def bytes_served(self, key: str | None = None) -> int:
        """Body bytes sent for ``key`` (or for every key) by GETs since the last reset."""
        with self._lock:
            return sum(c.sent for c in self.calls if key is None or c.key == key)

    # -- internals used by the handler ----------------------------------------------------------
    def _add_fault(self, fault: _Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _take_fault(self, kinds: Iterable[str], call: Call) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.kind in kinds and (fault.match is None or fault.match(call)):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def _bucket(self, name: str) -> _Bucket:
        with self._lock:
            bucket = self._buckets.get(name)
        if bucket is None:
            raise OssError(404, "NoSuchBucket", BucketName=name)
        return bucket

    def _store(
        self,
        bucket: _Bucket,
        key: str,
        body: Path,
        content_type: str,
        content_md5: str | None,
        parts: int = 0,
    ) -> _Object:
        md5, crc = hashlib.md5(), oss2.utils.Crc64()
        size = 0
        with body.open("rb") as f:
            while chunk := f.read(_CHUNK):
                md5.update(chunk)
                crc.update(chunk)
                size += len(chunk)
        if content_md5 is not None and content_md5 != base64.b64encode(md5.digest()).decode():
            raise OssError(400, "InvalidDigest", "The Content-MD5 you specified is not valid.")
        etag, kind = md5.hexdigest().upper(), "Normal"
        if parts:
            etag, kind = f"{_multipart_md5(body, size, parts)}-{parts}", "Multipart"
        path = self._new_path()
        body.rename(path)  # out of the handler's way: it deletes its upload file when done
        obj = _Object(path, size, etag, crc.crc, time.time(), content_type, kind)
        with self._lock:
            old = bucket.objects.get(key)
            bucket.objects[key] = obj
        if old:
            old.path.unlink(missing_ok=True)  # readers that opened it keep their descriptor
        return obj

    def _new_path(self) -> Path:
        return self._root / uuid.uuid4().hex


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # a client hanging up is no news


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "AliyunOSS"
    sys_version = ""

    @property
    def oss(self) -> OssServer:
        return self.server.oss  # type: ignore[attr-defined,no-any-return]

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's algorithm holds
        # the body of a small object until the client's delayed ACK, ~10 ms a request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        pass  # tests read counters, not access logs

    # -- dispatch -------------------------------------------------------------------------------
    def _serve(self) -> None:
        if self.oss.first_byte_s:
            time.sleep(self.oss.first_byte_s)
        self.request_id = secrets.token_hex(12).upper()
        url = urlsplit(self.path)
        bucket_name, _, key = url.path.lstrip("/").partition("/")
        bucket_name, key = unquote(bucket_name), unquote(key)
        self.bucket_name = bucket_name
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        headers = {k.lower(): v for k, v in self.headers.items()}
        call = self.call = Call(self.command, bucket_name, key, headers.get("range"))
        body: Path | None = None
        try:
            body = self._receive_body() if self.command in ("PUT", "POST") else None
            before = self.oss._take_fault(["before"], call)
            if before is not None and before.action is not None:
                before.action()
            fault = self.oss._take_fault(["fail"], call)
            if fault:
                code = "InternalError" if fault.status == 500 else "ServiceUnavailable"
                raise OssError(fault.status, code)
            bucket = self.oss._bucket(bucket_name) if bucket_name else None
            key_id = _authenticate(self.oss, self.command, bucket_name, key, query, headers)
            if bucket is not None:
                _authorize(bucket, key_id, self.command)
            self._dispatch(bucket, key, query, headers, body)
        except OssError as e:
            self._send_error(e)
        finally:
            if body is not None:
                body.unlink(missing_ok=True)  # stored objects were moved away already

    do_GET = do_HEAD = do_PUT = do_DELETE = do_POST = _serve

    def _dispatch(
        self,
        bucket: _Bucket | None,
        key: str,
        query: dict[str, str],
        headers: dict[str, str],
        body: Path | None,
    ) -> None:
        method = self.command
        unsupported = sorted(q for q in query if q in _SUBRESOURCES and q != "continuation-token")
        if bucket is None or unsupported or method == "POST":
            raise OssError(400, "NotImplemented", "This stand-in does not implement it.")
        if not key:
            if method == "GET":
                with self.oss._lock:
                    objects = dict(bucket.objects)
                xml = _list_objects(bucket.name, objects, query)
                return self._reply(200, xml.encode(), "application/xml")
            raise OssError(400, "NotImplemented", "This stand-in does not implement it.")
        if method == "PUT":
            assert body is not None
            return self._put(bucket, key, headers, body)
        if method == "DELETE":
            with self.oss._lock:
                old = bucket.objects.pop(key, None)
            if old:
                old.path.unlink(missing_ok=True)
            return self._reply(204, b"")
        with self.oss._lock:
            obj = bucket.objects.get(key)
        if obj is None:
            raise OssError(404, "NoSuchKey", Key=key)
        return self._get(obj, headers)

    # -- operations -----------------------------------------------------------------------------
    def _put(self, bucket: _Bucket, key: str, headers: dict[str, str], body: Path) -> None:
        content_type = headers.get("content-type", "application/octet-stream")
        obj = self.oss._store(bucket, key, body, content_type, headers.get("content-md5"))
        md5_b64 = base64.b64encode(bytes.fromhex(obj.etag)).decode()
        extra = {"ETag": f'"{obj.etag}"', "Content-MD5": md5_b64}
        if self.oss.crc_headers:
            extra["x-oss-hash-crc64ecma"] = str(obj.crc)
        self._reply(200, b"", headers=extra)

    def _get(self, obj: _Object, headers: dict[str, str]) -> None:
        etag = f'"{obj.etag}"'
        if headers.get("if-match", "*").strip() != "*" and not _etag_in(headers["if-match"], obj):
            raise OssError(412, "PreconditionFailed", Condition="If-Match")
        meta = {
            "ETag": etag,
            "Last-Modified": email.utils.formatdate(obj.mtime, usegmt=True),
            "Content-Type": obj.content_type,
            "Accept-Ranges": "bytes",
            "x-oss-object-type": obj.type,
            "x-oss-storage-class": "Standard",
        }
        if self.oss.crc_headers:
            meta["x-oss-hash-crc64ecma"] = str(obj.crc)
        none_match = headers.get("if-none-match", "")
        if none_match.strip() == "*" or _etag_in(none_match, obj):
            return self._reply(304, b"", headers=meta, length=False)
        start, end = 0, obj.size - 1
        status = 200
        wanted = _parse_range(headers.get("range"), obj.size)
        if wanted:
            (start, end), status = wanted, 206
            meta["Content-Range"] = f"bytes {start}-{end}/{obj.size}"
        elif headers.get("range") and headers.get("x-oss-range-behavior") == "standard":
            raise OssError(416, "InvalidRange", "The requested range cannot be satisfied.")
        count = end - start + 1 if obj.size else 0
        self._start_reply(status, meta, count)
        if self.command == "GET":
            self._send_file(obj.path, start, count)

    def _send_file(self, path: Path, offset: int, count: int) -> None:
        fault = self.oss._take_fault(["drop", "corrupt", "slow"], self.call)
        with path.open("rb") as f:
            f.seek(offset)
            if fault and fault.kind == "drop":
                count = min(fault.after, count)
                self.close_connection = True
            self.call.sent = count
            if fault is None:
                if count:
                    self.connection.sendfile(f, offset, count)
                return
            first = True
            piece = _SLOW_PIECE if fault.kind == "slow" else _CHUNK
            while count > 0 and (chunk := f.read(min(piece, count))):
                if fault.kind == "corrupt" and first:
                    chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                self.wfile.write(chunk)
                count, first = count - len(chunk), False
                if fault.kind == "slow":
                    self.wfile.flush()
                    time.sleep(len(chunk) / fault.rate)  # the link's pace, not a test wait

    # -- wire helpers ---------------------------------------------------------------------------
    def _receive_body(self) -> Path:
        path = self.oss._new_path()
        with path.open("wb") as f:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                # requests streams file-like bodies of unknown length this way.
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    self._copy_body(f, size)
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
            elif (length := self.headers.get("Content-Length")) is not None:
                self._copy_body(f, int(length))
            else:
                self.close_connection = True
                raise OssError(411, "MissingContentLength", "You must provide the Content-Length.")
        return path

    def _copy_body(self, f: BinaryIO, remaining: int) -> None:
        while remaining and (chunk := self.rfile.read(min(_CHUNK, remaining))):
            f.write(chunk)
            remaining -= len(chunk)

    def _start_reply(self, status: int, headers: Mapping[str, str], length: int) -> None:
        self.call.status = status
        self.oss._record(self.call)
        self.send_response(status)
        self.send_header("x-oss-request-id", self.request_id)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _reply(
        self,
        status: int,
        body: bytes,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        length: bool = True,
    ) -> None:
        meta = dict(headers or {})
        if content_type:
            meta["Content-Type"] = content_type
        self._start_reply(status, meta, len(body) if length else 0)
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_error(self, e: OssError) -> None:
        host = self.headers.get("Host", "127.0.0.1")
        host_id = f"{self.bucket_name}.{host}" if self.bucket_name else host
        fields = {"Code": e.code, "Message": e.message, "RequestId": self.request_id}
        fields |= {"HostId": host_id, **e.extra}
        xml = '<?xml version="1.0" encoding="UTF-8"?>\n<Error>\n'
        xml += "".join(f"  <{k}>{escape(v)}</{k}>\n" for k, v in fields.items()) + "</Error>\n"
        if self.command == "HEAD":
            err = base64.b64encode(xml.encode()).decode()
            self._reply(e.status, b"", "application/xml", {"x-oss-err": err})
        else:
            self._reply(e.status, xml.encode(), "application/xml")


# -- authentication ------------------------------------------------------------------------------
def _authenticate(
    server: OssServer,
    method: str,
    bucket: str,
    key: str,
    query: Mapping[str, str],
    headers: Mapping[str, str],
) -> str | None:
    """The AccessKey id that signed the request (``None``: anonymous), or an OssError."""
    authorization = headers.get("authorization")
    if authorization is None:
        return None
    scheme, _, rest = authorization.partition(" ")
    if scheme == "OSS":
        key_id, _, signature = rest.rpartition(":")
        secret = _known(server, key_id, headers)
        _check_skew(headers.get("x-oss-date") or headers.get("date", ""))
        to_sign = _v1_string_to_sign(method, bucket, key, query, headers)
        expected = base64.b64encode(
            hmac.new(secret.encode(), to_sign.encode(), hashlib.sha1).digest()
        ).decode()
    elif scheme == "OSS4-HMAC-SHA256":
        fields = dict(p.strip().partition("=")[::2] for p in rest.split(","))
        key_id, _, scope = fields.get("Credential", "").partition("/")
        signature = fields.get("Signature", "")
        secret = _known(server, key_id, headers)
        stamp = headers.get("x-oss-date", "")
        _check_skew(stamp, iso=True)
        additional = [h for h in fields.get("AdditionalHeaders", "").split(";") if h]
        canonical = _v4_canonical_request(method, bucket, key, query, headers, additional)
        scope = f"{stamp[:8]}/{server.region}/oss/aliyun_v4_request"
        to_sign = "\n".join(
            ["OSS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signing_key = ("aliyun_v4" + secret).encode()
        for part in (stamp[:8], server.region, "oss", "aliyun_v4_request"):
            signing_key = hmac.new(signing_key, part.encode(), hashlib.sha256).digest()
        expected = hmac.new(signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
    else:
        raise OssError(400, "InvalidArgument", "Authorization header is invalid.")
    if not hmac.compare_digest(expected, signature):
        raise OssError(
            403,
            "SignatureDoesNotMatch",
            StringToSign=to_sign,
            SignatureProvided=signature,
            OSSAccessKeyId=key_id,
        )
    return key_id


def _known(server: OssServer, key_id: str, headers: Mapping[str, str]) -> str:
    if key_id not in server._credentials:
        raise OssError(403, "InvalidAccessKeyId", OSSAccessKeyId=key_id)
    secret, token = server._credentials[key_id]
    if token is not None and headers.get("x-oss-security-token") != token:
        raise OssError(
            403,
            "InvalidAccessKeyId",
            "The security token you provided is invalid.",
            OSSAccessKeyId=key_id,
        )
    return secret


def _check_skew(stamp: str, iso: bool = False) -> None:
    try:
        when = (
            datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            if iso
            else email.utils.parsedate_to_datetime(stamp)
        )
    except (TypeError, ValueError):
        raise OssError(403, "AccessDenied", "Invalid date or no date given.") from None
    if abs(time.time() - when.timestamp()) > MAX_SKEW_SECONDS:
        raise OssError(403, "RequestTimeTooSkewed", MaxAllowedSkewMilliseconds="900000")


def _v1_string_to_sign(
    method: str, bucket: str, key: str, query: Mapping[str, str], headers: Mapping[str, str]
) -> str:
    oss_headers = sorted((k, v) for k, v in headers.items() if k.startswith("x-oss-"))
    resource = f"/{bucket}/{key}" if bucket else "/"
    sub = sorted((k, v) for k, v in query.items() if k in _SUBRESOURCES)
    if sub:
        resource += "?" + "&".join(f"{k}={v}" if v else k for k, v in sub)
    return "\n".join(
        [
            method,
            headers.get("content-md5", ""),
            headers.get("content-type", ""),
            headers.get("x-oss-date") or headers.get("date", ""),
            "".join(f"{k}:{v}\n" for k, v in oss_headers) + resource,
        ]
    )


def _v4_canonical_request(
    method: str,
    bucket: str,
    key: str,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    additional: list[str],
) -> str:
    path = quote(f"/{bucket}/{key}" if bucket else "/", safe="/~")
    params = sorted((quote(k, safe="~"), quote(v, safe="~")) for k, v in query.items())
    signed = sorted(
        (k, v)
        for k, v in headers.items()
        if k.startswith("x-oss-") or k in ("content-type", "content-md5") or k in additional
    )
    return "\n".join(
        [
            method,
            path,
            "&".join(f"{k}={v}" if v else k for k, v in params),
            "".join(f"{k}:{v}\n" for k, v in signed),
            ";".join(sorted(additional)),
            headers.get("x-oss-content-sha256", "UNSIGNED-PAYLOAD"),
        ]
    )


def _authorize(bucket: _Bucket, key_id: str | None, method: str) -> None:
    reading = method in ("GET", "HEAD")
    if key_id is None:
        allowed = reading and bucket.acl == "public-read"
    elif bucket.grants is None:
        allowed = True
    else:
        grant = bucket.grants.get(key_id)
        allowed = grant == "read-write" or (grant == "read" and reading)
    if not allowed:
        raise OssError(403, "AccessDenied")


# -- listing --------------------------------------------------------------------------------------
def _list_objects(name: str, objects: Mapping[str, _Object], query: Mapping[str, str]) -> str:
    v2 = query.get("list-type") == "2"
    prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
    encode = query.get("encoding-type", "")
    if encode not in ("", "url"):
        raise OssError(400, "InvalidArgument", "Invalid Encoding Method specified in Request")
    try:
        max_keys = int(query.get("max-keys", "100"))
        if not 0 <= max_keys <= 1000:
            raise ValueError
    except ValueError:
        raise OssError(
            400, "InvalidArgument", "Argument max-keys must be an integer between 0 and 1000."
        ) from None
    token = query.get("continuation-token", "")
    after = query.get("start-after" if v2 else "marker", "")
    if v2 and token:
        try:
            after = str(json.loads(base64.urlsafe_b64decode(token.encode())))
        except ValueError:
            raise OssError(400, "InvalidArgument", "The continuation token is invalid.") from None

    # Keys under one common prefix sort together, so it is enough to collapse neighbours.
    items: list[tuple[str, bool]] = []  # (key or common prefix, is a common prefix)
    for k in sorted(k for k in objects if k.startswith(prefix)):
        cut = k.find(delimiter, len(prefix)) if delimiter else -1
        item = k[: cut + len(delimiter)] if cut >= 0 else k
        if item > after and not (items and items[-1][0] == item):
            items.append((item, cut >= 0))
    page, truncated = items[:max_keys], len(items) > max_keys

    def text(s: str) -> str:
        return escape(quote(s, safe="/") if encode else s)

    out = [f"<Name>{escape(name)}</Name>", f"<Prefix>{text(prefix)}</Prefix>"]
    out.append(f"<MaxKeys>{max_keys}</MaxKeys>")
    if delimiter:
        out.append(f"<Delimiter>{text(delimiter)}</Delimiter>")
    if encode:
        out.append("<EncodingType>url</EncodingType>")
    if v2 and query.get("start-after"):
        out.append(f"<StartAfter>{text(query['start-after'])}</StartAfter>")
    if v2 and token:
        out.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
    if not v2:
        out.append(f"<Marker>{text(query.get('marker', ''))}</Marker>")
    out.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
    if truncated and v2:
        next_token = base64.urlsafe_b64encode(json.dumps(page[-1][0]).encode()).decode()
        out.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
    elif truncated:
        out.append(f"<NextMarker>{text(page[-1][0])}</NextMarker>")
    if v2:
        out.append(f"<KeyCount>{len(page)}</KeyCount>")
    owner = "<Owner><ID>0022012</ID><DisplayName>0022012</DisplayName></Owner>"
    with_owner = query.get("fetch-owner") == "true" or not v2
    for item, is_prefix in page:
        if is_prefix:
            continue
        obj = objects[item]
        modified = datetime.fromtimestamp(obj.mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        out.append(
            f"<Contents><Key>{text(item)}</Key><LastModified>{modified}</LastModified>"
            f'<ETag>"{obj.etag}"</ETag><Type>{obj.type}</Type><Size>{obj.size}</Size>'
            f"<StorageClass>Standard</StorageClass>{owner if with_owner else ''}</Contents>"
        )
    out.extend(
        f"<CommonPrefixes><Prefix>{text(p)}</Prefix></CommonPrefixes>" for p, is_p in page if is_p
    )
    body = "".join(out)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult>{body}</ListBucketResult>'


def _etag_in(header: str, obj: _Object) -> bool:
    """Whether an If-Match/If-None-Match list (``"a", W/"b"``) names the object's ETag."""
    tags = (t.strip().removeprefix("W/").strip('"') for t in header.split(","))
    return obj.etag in tags


def _multipart_md5(path: Path, size: int, parts: int) -> str:
    """The hex MD5 of the concatenated binary MD5s of ``parts`` equal parts of a file."""
    step = max(1, -(-size // parts))
    digests = b""
    with path.open("rb") as f:
        for _ in range(parts):
            digests += hashlib.md5(f.read(step)).digest()
    return hashlib.md5(digests).hexdigest().upper()


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """A satisfiable single range ``bytes=a-b``, ``a-`` or ``-n``; ``None`` means whole object."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes=") :].partition("-")
    try:
        if first == "":
            start, end = max(0, size - int(last)), size - 1
        else:
            start, end = int(first), (int(last) if last else size - 1)
    except ValueError:
        return None
    if start > end or start >= size:
        return None
    return start, min(end, size - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--access-key-id", required=True)
    parser.add_argument("--access-key-secret", required=True)
    parser.add_argument("--bucket", action="append", default=[])
    parser.add_argument("--region", default="cn-hangzhou")
    parser.add_argument("--first-byte-ms", type=float, default=0.0, help="latency per request")
    args = parser.parse_args()
    server = OssServer(region=args.region)
    server.first_byte_s = args.first_byte_ms / 1000
    server.add_credential(args.access_key_id, args.access_key_secret)
    for name in args.bucket:
        server.create_bucket(name)
    with server:
        print(f"endpoint {server.endpoint}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
