"""``openeas processor model-cache``: the node cache's HTTP face, one per node (the chart's
``modelCache`` DaemonSet), reached by the pulls of that node's replicas through a Service with
``internalTrafficPolicy: Local``.

``GET /objects/<address>`` answers the bytes with ``X-Openeas-Crc64`` (the CRC-64 they had
when offered: the pull checks it, so a corrupted copy is noticed and fetched again from OSS)
or 404. ``PUT /objects/<address>`` (``Content-Length``, ``X-Openeas-Crc64``,
``X-Openeas-Etag``) offers an object a pull fetched and verified; 201, or 400/413 when it is
refused. Both need ``Authorization: Bearer <token>`` (``OPENEAS_MODEL_CACHE_TOKEN``): the
token is given to the pull init containers only, never to the replica's own containers,
whose code shares the pod's address and so passes the NetworkPolicy — without it, code in one
tenant's replica could plant bytes under the ETag of a model it knows. ``GET /healthz`` for
probes needs none. Old objects are swept at start and at most every
:data:`SWEEP_EVERY` seconds when requests come (none on an idle node).
"""

from __future__ import annotations

import hmac
import logging
import os
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from processors.model_cache.store import ADDRESS, Refused, Store
from processors.model_cache.wire import CRC_HEADER, ETAG_HEADER, TOKEN_ENV

SWEEP_EVERY = 3600.0

log = logging.getLogger(__name__)


class CacheServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: Store, host: str, port: int, *, token: str) -> None:
        super().__init__((host, port), _Handler)
        self.store = store
        self.authorization = f"Bearer {token}".encode()
        self._swept = time.monotonic()
        self._sweep_lock = threading.Lock()
        self._report(store.sweep())

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def maybe_sweep(self) -> None:
        with self._sweep_lock:
            if time.monotonic() - self._swept < SWEEP_EVERY:
                return
            self._swept = time.monotonic()
        self._report(self.store.sweep())

    @staticmethod
    def _report(gone: list[str]) -> None:
        if gone:
            log.info("swept %d objects unused too long", len(gone))


class _Handler(BaseHTTPRequestHandler):
    server: CacheServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/healthz":
            return self._answer(200, "ok")
        key = self._key()
        if key is None:
            return None
        self.server.maybe_sweep()
        hit = self.server.store.get(key)
        if hit is None:
            return self._answer(404, "not cached")
        try:
            source = hit.path.open("rb")
        except OSError:  # evicted between the lookup and the read
            return self._answer(404, "not cached")
        with source:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(hit.size))
            self.send_header(CRC_HEADER, str(hit.crc))
            self.end_headers()
            shutil.copyfileobj(source, self.wfile, 1 << 20)
        return None

    def do_PUT(self) -> None:
        key = self._key()
        if key is None:
            return
        try:
            length = int(self.headers["Content-Length"])
            crc = int(self.headers[CRC_HEADER])
        except (TypeError, ValueError):
            self.close_connection = True  # the body's end is unknown
            return self._answer(400, f"give Content-Length and {CRC_HEADER} as integers")
        try:
            self.server.store.put(key, self.rfile, length, crc, self.headers.get(ETAG_HEADER, ""))
        except Refused as e:
            self.close_connection = True  # the rest of the body may be unread
            return self._answer(e.status, str(e))
        self.server.maybe_sweep()
        return self._answer(201, "cached")

    def _key(self) -> str | None:
        given = self.headers.get("Authorization", "").encode("latin-1", "replace")
        if not hmac.compare_digest(given, self.server.authorization):
            self.close_connection = True  # an upload's body stays unread
            self._answer(401, f"give the cache's token (Authorization: Bearer ${TOKEN_ENV})")
            return None
        prefix, _, key = self.path.partition("/objects/")
        if prefix or not ADDRESS.fullmatch(key):
            self._answer(404, "use /objects/<64 hex digits>")
            return None
        return key

    def _answer(self, status: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug(format, *args)


def serve(root: Path, *, max_bytes: int, max_age_days: float, host: str, port: int) -> None:
    """Run the cache until interrupted, with the token in ``OPENEAS_MODEL_CACHE_TOKEN``."""
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise SystemExit(f"openeas: set {TOKEN_ENV} (the chart's generated model-cache-token)")
    store = Store(root, max_bytes=max_bytes, max_age_s=max_age_days * 86400)
    with CacheServer(store, host, port, token=token) as server:
        log.info("model cache in %s (at most %d bytes) on %s", root, max_bytes, server.url)
        server.serve_forever()
