"""Token bucket and in-flight cap (pure, fake clock)."""

from __future__ import annotations

from gateway.routing.limits import InFlight, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_rate_per_second_then_refuses() -> None:
    clock = Clock()
    bucket = TokenBucket(5, clock=clock)
    assert [bucket.try_acquire() for _ in range(6)] == [True] * 5 + [False]
    assert bucket.retry_after_s() == 1
    clock.now += 0.2  # one token back
    assert bucket.try_acquire()
    assert not bucket.try_acquire()
    clock.now += 10  # refills up to the burst only
    assert sum(bucket.try_acquire() for _ in range(20)) == 5


def test_bucket_below_one_qps() -> None:
    clock = Clock()
    bucket = TokenBucket(0.5, clock=clock)
    assert bucket.try_acquire()
    assert not bucket.try_acquire()
    assert bucket.retry_after_s() == 2
    clock.now += 2
    assert bucket.try_acquire()


def test_in_flight_cap() -> None:
    cap = InFlight(2)
    assert cap.try_enter() and cap.try_enter()
    assert not cap.try_enter()
    cap.leave()
    assert cap.try_enter()
    unbounded = InFlight(None)
    assert all(unbounded.try_enter() for _ in range(1000))
