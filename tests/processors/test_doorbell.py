"""The replica's side of the doorbell: rings reach the runtime's pipe (and nothing breaks
when nobody listens), and the readiness wait answers once the server says 200."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from processors.doorbell import ENV_FD, LOOK, SERVER_STARTED, Doorbell, wait_ready


def test_rings_reach_the_pipe_and_a_closed_pipe_silences_the_bell() -> None:
    read, write = os.pipe()
    bell = Doorbell.from_env({ENV_FD: str(write)})
    bell.ring(SERVER_STARTED)
    bell.ring()
    assert os.read(read, 16) == SERVER_STARTED + LOOK
    os.close(read)
    bell.ring()  # EPIPE: the runtime went away
    assert bell.fd is None
    os.close(write)
    Doorbell.from_env({}).ring()  # no runtime (Kubernetes): nothing to do


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_wait_ready_answers_once_the_readiness_path_says_200(
    child: subprocess.Popen[bytes],
) -> None:
    status = {"code": 400}  # Triton's answer while it loads

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status["code"] if self.path == "/v2/health/ready" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            status["code"] = 200  # the next probe finds it ready

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert wait_ready("127.0.0.1", int(port), "/v2/health/ready", child, poll_s=0.01)
        assert status["code"] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_wait_ready_gives_up_when_the_server_ends(child: subprocess.Popen[bytes]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])  # bound, never listening: every connect is refused
        child.kill()
        child.wait()
        assert not wait_ready("127.0.0.1", port, "/v2/health/ready", child, poll_s=0.01)
