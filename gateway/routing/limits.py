"""Per-service admission limits: a token bucket for ``rate_limit`` (QPS) and an in-flight
cap for ``max_queue_size``. Pure logic with an injectable clock; the proxy asks before
forwarding and answers with the refusal's status: 429 over the rate, 450 (EAS's queue full:
not processed, retry) over the in-flight cap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst`` (default: one second's worth,
    at least 1). Each admitted request takes one token."""

    __slots__ = ("_clock", "_stamp", "_tokens", "burst", "rate")

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = float(rate)
        self.burst = float(burst) if burst is not None else max(1.0, self.rate)
        self._clock = clock
        self._tokens = self.burst
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._stamp
        if elapsed > 0:
            self._tokens = min(self.burst, self._tokens + elapsed * self.rate)
        self._stamp = now

    def try_acquire(self) -> bool:
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def retry_after_s(self) -> int:
        """Whole seconds until a token is available (for ``Retry-After``; at least 1)."""
        self._refill()
        missing = max(0.0, 1.0 - self._tokens)
        return max(1, math.ceil(missing / self.rate))


class InFlight:
    """Requests of one service currently being forwarded; ``limit`` None = unbounded.

    It also keeps what the autoscaler's report needs: requests admitted and the area under
    the in-flight count since the reporter last took them (:meth:`take`), and ``active``,
    set while the service is in the :class:`Activity` the reporter reads."""

    __slots__ = ("_clock", "active", "area", "count", "limit", "requests", "since")

    def __init__(
        self, limit: int | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.count = 0
        self.limit = limit
        self.requests = 0
        self.area = 0.0  # ∫ count dt since ``since``
        self._clock = clock
        self.since = clock()
        self.active = False

    def _integrate(self) -> None:
        self._integrate_at(self._clock())

    def _integrate_at(self, now: float) -> None:
        self.area += self.count * (now - self.since)
        self.since = now

    def try_enter(self) -> bool:
        return self.enter_at(self._clock())

    def enter_at(self, now: float) -> bool:
        """:meth:`try_enter` at ``now``, read by the caller from this count's clock (the
        proxy reads it once per call, not once per step)."""
        if self.limit is not None and self.count >= self.limit:
            return False
        self._integrate_at(now)
        self.count += 1
        self.requests += 1
        return True

    def enter_held(self) -> None:
        """A request held while its service wakes from zero: in flight for the load report
        (the autoscaler sees the demand), but neither admitted nor limited yet."""
        self._integrate()
        self.count += 1

    def leave(self) -> None:
        self.leave_at(self._clock())

    def leave_at(self, now: float) -> None:
        self._integrate_at(now)
        self.count -= 1

    def take(self, interval_s: float) -> tuple[int, float]:
        """Requests admitted and mean in-flight count since the last take; resets both."""
        self._integrate()
        requests, mean = self.requests, self.area / interval_s if interval_s > 0 else 0.0
        self.requests, self.area = 0, 0.0
        return requests, mean


@dataclass(frozen=True, slots=True)
class OverLimit:
    """Why a call was not admitted, and when a retry may pass."""

    detail: str
    retry_after_s: int
    status: int = 429  # 450 for a full queue, as EAS answers it


class Activity:
    """The services that had traffic since the reporter last looked: the proxy adds a
    service on its first admitted request, so a report costs the busy services only, and an
    idle reporter sleeps until the next one calls ``on_touch`` (once, then it is cleared)."""

    __slots__ = ("on_touch", "touched")

    def __init__(self) -> None:
        self.touched: dict[str, InFlight] = {}
        self.on_touch: Callable[[], None] | None = None

    def touch(self, service: str, in_flight: InFlight) -> None:
        in_flight.active = True
        self.touched[service] = in_flight
        if self.on_touch is not None:
            on_touch, self.on_touch = self.on_touch, None
            on_touch()

    def drain(self) -> dict[str, InFlight]:
        """What was touched; from now on a service is added again on its next request."""
        touched, self.touched = self.touched, {}
        for in_flight in touched.values():
            in_flight.active = False
        return touched
