"""A replica's doorbell: one byte on a pipe the local runtime hands it, so the runtime looks
at the replica *now* instead of at its next probe.

The local runtime (:mod:`controlplane.runtime.local`) opens a pipe per start of a replica
whose plan ``rings`` and names its write end in ``$OPENEAS_DOORBELL_FD``; the processor
rings :data:`SERVER_STARTED` once it has launched its server (what the cold-start
breakdown calls the end of the process start), :data:`LOOK` when a progress phase changes
and when the server is ready. A ring is a hint, never a verdict: the runtime still probes
the readiness path (and the warm-up gate) itself, so a lost ring costs only its probe
period. Without the variable (Kubernetes, a manual run) ringing does nothing.

:func:`wait_ready` is how the replica learns its server is ready: a TCP connect every
``POLL_S`` while nothing listens (a refused connect costs the replica's own process a
system call, and only while its server starts), then an HTTP check of the readiness path.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Mapping

ENV_FD = "OPENEAS_DOORBELL_FD"
SERVER_STARTED = b"s"
LOOK = b"l"
POLL_S = 0.02  # between connects while the server starts (its readiness to the runtime)


class Doorbell:
    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Doorbell:
        value = environ.get(ENV_FD, "")
        return cls(int(value) if value.isdigit() else None)

    def ring(self, what: bytes = LOOK) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, what)
        except OSError:  # the runtime went away (EPIPE) or closed its end: nobody to tell
            self.fd = None


def wait_ready(
    host: str, port: int, path: str, child: subprocess.Popen[bytes], *, poll_s: float = POLL_S
) -> bool:
    """Return True once ``http://host:port{path}`` answers 200, False if ``child`` ends
    first. Triton opens its HTTP port only when its models are loaded, and answers 400 on
    the readiness path while it is not ready."""
    head = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
    while child.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection((host, port), 2) as conn:
            conn.sendall(head)
            status = conn.recv(64).split(b" ", 2)
            if len(status) > 1 and status[1] == b"200":
                return True
        time.sleep(poll_s)
    return False
