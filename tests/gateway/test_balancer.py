"""Replica choice: least outstanding, round-robin ties, refused replicas last (pure)."""

from __future__ import annotations

import pytest

from gateway.routing.balancer import EndpointPool, split_base_url


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_least_outstanding_wins() -> None:
    pool = EndpointPool()
    a, b, c = pool.resolve(["http://h:1", "http://h:2", "http://h:3"])
    a.outstanding, b.outstanding, c.outstanding = 3, 1, 2
    assert pool.choose((a, b, c)) is b


def test_ties_rotate() -> None:
    pool = EndpointPool()
    eps = pool.resolve(["http://h:1", "http://h:2", "http://h:3"])
    chosen = {pool.choose(eps).base_url for _ in range(6)}  # type: ignore[union-attr]
    assert chosen == {"http://h:1", "http://h:2", "http://h:3"}


def test_exclude_and_down() -> None:
    clock = Clock()
    pool = EndpointPool(down_s=1.0, clock=clock)
    a, b = pool.resolve(["http://h:1", "http://h:2"])
    assert pool.choose((a, b), exclude=(a, b)) is None
    assert pool.choose((a,), exclude=(a,)) is None
    pool.mark_down(a)
    b.outstanding = 50  # busier, but up: still preferred over a refusing replica
    assert all(pool.choose((a, b)) is b for _ in range(4))
    clock.now = 2.0
    assert pool.choose((a, b)) is a


def test_endpoints_are_shared_by_url() -> None:
    pool = EndpointPool()
    (a,) = pool.resolve(["http://h:1/"])
    a.outstanding = 4
    (again,) = pool.resolve(["http://h:1"])
    assert again is a
    pool.forget(["http://h:1"])  # no route lists it any more
    assert pool.resolve(["http://h:1"])[0] is a  # still busy: kept
    a.outstanding = 0
    pool.forget(["http://h:1"])  # no route lists it any more
    assert pool.resolve(["http://h:1"])[0] is not a


def test_invalid_urls_are_skipped() -> None:
    pool = EndpointPool()
    assert [e.base_url for e in pool.resolve(["https://h:1", "h:2", "http://h:3"])] == [
        "http://h:3"
    ]


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [("http://127.0.0.1:8000", "127.0.0.1", 8000), ("http://name", "name", 80)],
)
def test_split_base_url(url: str, host: str, port: int) -> None:
    assert split_base_url(url) == (host, port)
