"""The control plane as a running program: its listening socket, and what it costs idle."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from contract.wire import ROUTES_PATH
from controlplane import cli
from controlplane.server import ControlPlane, bind
from controlplane.settings import Settings
from controlplane.store import migrate, route_feed
from testing.waiting import wait_until
from tests.controlplane.conftest import ADMIN


def test_the_control_plane_serves_with_its_start_up_heap_frozen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unfrozen_heap: None
) -> None:
    """`openeas controlplane` freezes what its start-up built before it serves (startup.heap)."""
    monkeypatch.setenv("OPENEAS_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("OPENEAS_DATABASE_URL", raising=False)
    seen: list[int] = []

    def serve(main: Coroutine[Any, Any, None], stop: Callable[[], None]) -> int:
        seen.append(gc.get_freeze_count())
        main.close()
        return 0

    monkeypatch.setattr(cli, "run_until_signal", serve)
    assert cli.controlplane_main(["--migrate", "--port", "0", "--no-reconcile"]) == 0
    assert seen[0] > 1_000


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
    with serving(tmp_path) as port:
        first = wait_until(lambda: _date(port), what="the control plane's first answer")
        before = len(ticks)
        time.sleep(2.5)
        assert len(ticks) - before <= 3  # uvicorn's own loop: 25
        assert _date(port) != first  # the Date header moved on meanwhile
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 0.5  # not at the next tick, up to 1 s away


def test_a_route_long_poll_sleeps_until_its_gateway_goes_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway's long-poll of the route table waits once for the whole ``wait`` (not in
    steps of a second, each waking to ask whether the gateway is still there: a wake-up
    a second per waiting gateway process) and ends as soon as the gateway goes away."""
    began: list[float] = []
    ended: list[float] = []
    wait_past = route_feed.VersionWatch.wait_past

    async def counted(self: route_feed.VersionWatch, after: int, timeout: float) -> bool:
        began.append(timeout)
        try:
            return await wait_past(self, after, timeout)
        finally:
            ended.append(timeout)

    monkeypatch.setattr(route_feed.VersionWatch, "wait_past", counted)
    with serving(tmp_path) as port:
        wait_until(lambda: _date(port), what="the control plane's first answer")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", ROUTES_PATH, headers={"Authorization": f"Bearer {ADMIN}"})
        version = json.loads(conn.getresponse().read())["version"]
        before = len(began)
        gateway = socket.create_connection(("127.0.0.1", port))
        gateway.sendall(
            f"GET {ROUTES_PATH}?after={version}&wait=30 HTTP/1.1\r\nHost: cp\r\n"
            f"Authorization: Bearer {ADMIN}\r\n\r\n".encode()
        )
        wait_until(lambda: len(began) > before, what="the long-poll waiting")
        time.sleep(2.5)
        assert began[before:] == [30.0]  # one wait, whole (steps: three by now)
        assert len(ended) == before
        gateway.close()
        wait_until(lambda: len(ended) == len(began), timeout=1.0, what="the long-poll's end")
        conn.close()


@contextlib.contextmanager
def serving(data_dir: Path) -> Iterator[int]:
    """The port of a control plane (no reconciler) serving in a thread of its own; stopped,
    and its thread gone, on the way out."""
    settings = Settings(data_dir=data_dir, admin_token=ADMIN)
    migrate.upgrade(settings.sqlalchemy_url)
    plane = ControlPlane(settings, reconcile=False)
    sock = bind("127.0.0.1", 0)
    thread = threading.Thread(target=lambda: asyncio.run(plane.serve(sock)))
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        plane.stop()
        thread.join(10)
    assert not thread.is_alive()
