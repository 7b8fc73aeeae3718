"""A Kubernetes Service in front of several processes, for tests: one TCP port on 127.0.0.1
whose connections go to a backend that accepts them, trying the next when one refuses.

What the chart's control-plane Service does for a gateway: the gateway knows one URL, and a
control-plane replica that died (its port refuses, as kube-proxy drops an endpoint whose
readiness fails) is skipped on the next connection. Connections in progress to a backend
that dies end with it, as they do through kube-proxy.

Not covered: readiness probes (a hung backend still gets connections), session affinity,
load spreading beyond rotating the first choice.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading


class ServiceProxy:
    def __init__(self, backends: list[tuple[str, int]]) -> None:
        self.backends = backends
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._turn = itertools.count()
        self._closed = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def start(self) -> ServiceProxy:
        threading.Thread(target=self._accept, name="service-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        first = next(self._turn)
        for i in range(len(self.backends)):
            backend = self.backends[(first + i) % len(self.backends)]
            try:
                upstream = socket.create_connection(backend, timeout=2)
            except OSError:
                continue  # refused: not a live endpoint
            upstream.settimeout(None)
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
            _pipe(client, upstream)
            return
        client.close()  # no endpoint: the client sees the connection end


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then end ``sink`` (both ways end either way)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        source.close()
