"""The control plane as a running program: its listening socket, and what it costs idle."""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from controlplane import migrate
from controlplane.server import ControlPlane, bind
from controlplane.settings import Settings
from testing.waiting import wait_until
from tests.controlplane.conftest import ADMIN


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


def _date(port: int) -> str | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/healthz", headers={"Connection": "close"})
        response = conn.getresponse()
        response.read()
        return response.getheader("date") if response.status == 200 else None
    except OSError:
        return None
    finally:
        conn.close()


def test_an_idle_control_plane_ticks_once_a_second_and_stops_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn wakes ten times a second to see whether it should stop; the control plane's
    server wakes once (its Date header still moves each second) and is stopped by an
    event, at once, from another thread."""
    ticks: list[int] = []
    tick = uvicorn.Server.on_tick

    async def counted(self: uvicorn.Server, counter: int) -> bool:
        ticks.append(counter)
        return await tick(self, counter)

    monkeypatch.setattr(uvicorn.Server, "on_tick", counted)
    settings = Settings(data_dir=tmp_path, admin_token=ADMIN)
    migrate.upgrade(settings.sqlalchemy_url)
    plane = ControlPlane(settings, reconcile=False)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    thread = threading.Thread(target=lambda: asyncio.run(plane.serve(sock)))
    thread.start()
    try:
        first = wait_until(lambda: _date(port), what="the control plane's first answer")
        before = len(ticks)
        time.sleep(2.5)
        assert len(ticks) - before <= 3  # uvicorn's own loop: 25
        assert _date(port) != first  # the Date header moved on meanwhile
    finally:
        stopping = time.monotonic()
        plane.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert time.monotonic() - stopping < 0.5  # not at the next tick, up to 1 s away
