"""The control plane's listening socket."""

from __future__ import annotations

import socket

from controlplane.server import bind


def test_accepted_connections_do_not_wait_for_delayed_acks() -> None:
    """uvicorn writes a response's head and body in two sends: with Nagle's algorithm the
    second waited for the client's delayed ACK, 40 ms on every keep-alive request."""
    listener = bind("127.0.0.1", 0)
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    try:
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        for s in (accepted, client, listener):
            s.close()
