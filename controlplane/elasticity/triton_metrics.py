"""Triton's own queue time per request, from each replica's metrics port (Prometheus text):
Δ``nv_inference_queue_duration_us`` ÷ Δ``nv_inference_request_success`` over all models,
summed across the service's ready replicas. Scraped by the leading autoscaler
(:mod:`controlplane.elasticity.scaling_loop`) only for services with a ``queue_time_ms``
strategy, at most once per ``min_interval_s`` each.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

QUEUE = "nv_inference_queue_duration_us"
SUCCESS = "nv_inference_request_success"

Fetch = Callable[[str], Awaitable[str]]


def counters(text: str) -> tuple[float, float]:
    """(queue µs, successful requests) summed over every model and version."""
    queue = success = 0.0
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name in (QUEUE, SUCCESS):
            value = float(rest.rsplit(" ", 1)[1])
            if name == QUEUE:
                queue += value
            else:
                success += value
    return queue, success


class QueueTimes:
    def __init__(
        self,
        fetch: Fetch,
        *,
        min_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._last: dict[str, dict[str, tuple[float, float]]] = {}  # service → url → counters
        self._value: dict[str, tuple[float, float | None]] = {}  # service → (at, ms)

    async def sample(self, service: str, urls: Sequence[str]) -> float | None:
        """Mean queue time (ms) of the requests served since the previous sample; 0 when
        none were; None until two samples exist."""
        now = self._clock()
        at, value = self._value.get(service, (float("-inf"), None))
        if now - at < self.min_interval_s:
            return value
        texts = await asyncio.gather(*(self._fetch(u) for u in urls), return_exceptions=True)
        previous = self._last.get(service, {})
        current: dict[str, tuple[float, float]] = {}
        queue = success = 0.0
        compared = False
        for url, text in zip(urls, texts, strict=True):
            if isinstance(text, BaseException):
                continue  # an unreachable replica adds nothing this time
            current[url] = c = counters(text)
            before = previous.get(url)
            if before is not None and c[1] >= before[1]:  # a restarted Triton starts at 0
                queue += c[0] - before[0]
                success += c[1] - before[1]
                compared = True
        self._last[service] = current  # replicas gone are forgotten
        value = (queue / success / 1000.0 if success else 0.0) if compared else None
        self._value[service] = (now, value)
        return value

    def forget(self, service: str) -> None:
        self._last.pop(service, None)
        self._value.pop(service, None)
