"""Per-service admission limits: a token bucket for ``rate_limit`` (QPS) and an in-flight
cap for ``max_queue_size``. Pure logic with an injectable clock; the proxy asks before
forwarding and answers 429 when refused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


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
    """Requests of one service currently being forwarded; ``limit`` None = unbounded."""

    __slots__ = ("count", "limit")

    def __init__(self, limit: int | None = None) -> None:
        self.count = 0
        self.limit = limit

    def try_enter(self) -> bool:
        if self.limit is not None and self.count >= self.limit:
            return False
        self.count += 1
        return True

    def leave(self) -> None:
        self.count -= 1
