"""``bench/hotpath.py``'s callers: the request it sends (with ``Connection: close`` under
``--new-connections``) and its sequential calls, on one connection or one per call."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.bench.scripts import load_bench


@pytest.fixture(scope="module")
def hotpath() -> ModuleType:
    return load_bench("hotpath.py", "bench_hotpath_calls")


@pytest.fixture
def canned(hotpath: ModuleType) -> Iterator[tuple[int, list[tuple[int, bytes]]]]:
    """A server answering each request head with the canned answer; its port, and each
    request it received with the number of the connection it came on."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[tuple[int, bytes]] = []

    def serve() -> None:
        accepted = 0
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted += 1
            with conn:
                got = b""
                while chunk := conn.recv(65536):
                    got += chunk
                    if got.endswith(b"\r\n\r\n"):  # the requests below have no body
                        received.append((accepted, got))  # before the caller hears
                        conn.sendall(hotpath.RESPONSE)
                        got = b""

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], received
    listener.close()


def test_close_asks_for_connection_close(hotpath: ModuleType) -> None:
    kept = hotpath.request_bytes("/p", b"", 0, "t")
    closing = hotpath.request_bytes("/p", b"", 0, "t", close=True)
    assert b"Connection: close\r\n" in closing and b"Connection" not in kept
    assert closing.replace(b"Connection: close\r\n", b"") == kept


@pytest.mark.parametrize(("fresh", "connections"), [(False, [1, 1, 1]), (True, [1, 2, 3])])
def test_sequential_calls_open_a_connection_per_call_when_fresh(
    hotpath: ModuleType,
    canned: tuple[int, list[tuple[int, bytes]]],
    fresh: bool,
    connections: list[int],
) -> None:
    port, received = canned
    request = hotpath.request_bytes("/p", b"", 0, "t", close=fresh)
    hotpath.sequential_calls(port, request, 3, fresh)
    assert received == [(n, request) for n in connections]
