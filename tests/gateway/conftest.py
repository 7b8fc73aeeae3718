"""Fixtures for the gateway tests: a loop thread, the echo upstream, a gateway factory."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contract.wire import RouteTable
from gateway.route_source import RouteSource, StaticRouteSource
from tests.fixtures_triton import launch_triton
from tests.gateway.harness import Echo, Gateway, LoopThread, start


@pytest.fixture(scope="module")
def lt() -> Iterator[LoopThread]:
    loop_thread = LoopThread()
    yield loop_thread
    loop_thread.close()


@pytest.fixture(scope="module")
def echo_server(lt: LoopThread) -> Iterator[Echo]:
    server = Echo()
    lt.run(server.start())
    yield server
    lt.run(server.stop())


@pytest.fixture
def echo(echo_server: Echo, lt: LoopThread) -> Echo:
    echo_server.seen.clear()
    echo_server.streamed = 0
    echo_server.hold_cancelled.clear()
    assert echo_server.hold_started is not None
    lt.call(echo_server.hold_started.clear)
    return echo_server


GatewayFactory = Callable[..., Gateway]


@pytest.fixture
def make_gateway(lt: LoopThread) -> Iterator[GatewayFactory]:
    started: list[Gateway] = []

    def factory(
        routes: RouteTable | None = None, *, source: RouteSource | None = None, **kw: Any
    ) -> Gateway:
        gw = start(lt, source if source is not None else StaticRouteSource(routes), **kw)
        started.append(gw)
        return gw

    yield factory
    for gw in started:
        gw.close()


@pytest.fixture
def second_triton(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Another real Triton serving ``add_sub``, in a session of its own (a test may kill it):
    its base URL and process."""
    triton, proc = launch_triton(
        tmp_path / "triton2.log",
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        new_session=True,
    )
    try:
        yield triton.base_url, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
