"""A little replica process for :mod:`testing.kubelet`: the HTTP surface of Triton a gateway
uses (``/v2/health/live``, ``/v2/health/ready``, ``POST /v2/models/<m>/infer``) on the pod's
address, answering each infer with who it is, so a test tells one generation from another.

``python -m testing.replica HOST PORT NAME GENERATION``. Keep-alive HTTP/1.1. On SIGTERM it
does what ``tritonserver`` does: stops accepting, lets requests in flight finish, exits.
Not covered: the rest of Triton's API, tensors (the answer is JSON naming the replica).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EXIT_WAIT_S = 30.0  # Triton's exit timeout: in-flight requests get this long


def main(argv: list[str]) -> None:
    host, port, name, generation = argv[0], int(argv[1]), argv[2], argv[3]
    busy = _InFlight()
    answer = {"replica": name, "generation": generation}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            ok = self.path in ("/v2/health/ready", "/v2/health/live")
            self._send(200 if ok else 404, b"")

        def do_POST(self) -> None:
            with busy:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = self.path.strip("/").split("/")
                if len(parts) != 4 or parts[:2] != ["v2", "models"] or parts[3] != "infer":
                    self._send(404, b'{"error":"not found"}')
                    return
                reply = {**answer, "model_name": parts[2], "received": len(body)}
                self._send(200, json.dumps(reply).encode())

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    print(f"replica {name} ({generation}) serving on {host}:{port}", flush=True)
    stop.wait()
    server.shutdown()
    server.socket.close()  # new connections are refused from here
    busy.drained(EXIT_WAIT_S)
    print(f"replica {name} stopped", flush=True)
    sys.stdout.flush()
    os._exit(0)  # idle keep-alive connections close with the process, as Triton's do


class _InFlight:
    def __init__(self) -> None:
        self._count = 0
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        with self._cond:
            self._count += 1

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify_all()

    def drained(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            self._cond.wait_for(lambda: self._count == 0, max(0.0, deadline - time.monotonic()))


if __name__ == "__main__":
    main(sys.argv[1:])
