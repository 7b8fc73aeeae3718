"""A gateway stopped under load drops no call: ``openeas gateway`` as a real process, calls
in flight to a slow replica, then SIGTERM (what the kubelet sends after the pod's preStop
delay). Every call in flight is answered whole; the listener closes at once, so new
connections go to the other gateways; the process exits when the last call is done, within
``OPENEAS_GATEWAY_SHUTDOWN_GRACE_S``; a call longer than the grace is cut there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.settings import GatewaySettings
from testing.waiting import wait_until
from tests.fixtures_triton import free_port
from tests.gateway.harness import SERVICE, TOKEN, Echo, FakeControlPlane, LoopThread, route, table

OPENEAS = Path(sys.executable).parent / "openeas"


@pytest.fixture
def upstream() -> Iterator[tuple[LoopThread, Echo, FakeControlPlane]]:
    lt = LoopThread()
    echo = Echo()
    lt.run(echo.start())
    cp = FakeControlPlane("adm-token", table(route([echo.url], timeout_ms=60_000)))
    lt.run(cp.start())
    yield lt, echo, cp
    lt.run(cp.stop())
    lt.run(echo.stop())
    lt.close()


def call(url: str, results: list[tuple[int, bytes] | str]) -> None:
    req = urllib.request.Request(url, headers={"Authorization": TOKEN})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            results.append((resp.status, resp.read()))
    except Exception as e:  # a dropped call is the finding
        results.append(f"{type(e).__name__}: {e}")


def start(
    cp: FakeControlPlane, tmp_path: Path, grace_s: float
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "OPENEAS_CONTROLPLANE_URL": cp.url,
        "OPENEAS_ADMIN_TOKEN": "adm-token",
        "OPENEAS_GATEWAY_SHUTDOWN_GRACE_S": str(grace_s),
    }
    proc = subprocess.Popen(
        [str(OPENEAS), "gateway", "--port", str(port)],
        env=env,
        stdout=(tmp_path / "gateway.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, (tmp_path / "gateway.log").read_text()
        try:
            with urllib.request.urlopen(f"{base}/gateway/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    wait_until(healthy, 30, what="the gateway serves")
    return proc, base


def test_the_default_grace_is_what_the_docs_say() -> None:
    assert GatewaySettings().shutdown_grace_s == 30.0
    operations = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    assert "in-flight requests 30 s" in operations


def test_sigterm_drains_every_call_in_flight_and_refuses_new_connections(
    upstream: tuple[LoopThread, Echo, FakeControlPlane], tmp_path: Path
) -> None:
    _, echo, cp = upstream
    proc, base = start(cp, tmp_path, grace_s=10)
    try:
        results: list[tuple[int, bytes] | str] = []
        calls = [
            threading.Thread(
                target=call, args=(f"{base}/api/predict/{SERVICE}/slow?s=2&i={i}", results)
            )
            for i in range(8)
        ]
        for t in calls:
            t.start()
        wait_until(
            lambda: sum(s.path_qs.startswith("/slow") for s in echo.seen) == 8,
            10,
            interval=0.02,
            what="8 calls reach the replica",
        )
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        refused: list[tuple[int, bytes] | str] = []
        call(f"{base}/api/predict/{SERVICE}/v2", refused)  # a new connection, after SIGTERM
        for t in calls:
            t.join(30)
        assert proc.wait(15) == 0
        exited = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(results) == 8 and all(r[0] == 200 for r in results if isinstance(r, tuple))
    assert [r for r in results if isinstance(r, str)] == []
    assert isinstance(refused[0], str) and "refused" in refused[0].lower()
    assert 1.0 < exited < 10  # it waited for the calls, not for the whole grace


def test_a_call_longer_than_the_grace_is_cut_when_the_grace_ends(
    upstream: tuple[LoopThread, Echo, FakeControlPlane], tmp_path: Path
) -> None:
    _, echo, cp = upstream
    proc, base = start(cp, tmp_path, grace_s=1)
    try:
        results: list[tuple[int, bytes] | str] = []
        slow = threading.Thread(
            target=call, args=(f"{base}/api/predict/{SERVICE}/slow?s=20", results)
        )
        slow.start()
        wait_until(lambda: len(echo.seen) == 1, 10, interval=0.02, what="the call is in flight")
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        exited = time.monotonic() - signalled
        slow.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert 0.8 < exited < 5
    assert len(results) == 1 and isinstance(results[0], str)  # cut, not answered
