"""Bounded retries with exponential backoff for temporary storage errors.

:func:`processors.storage.pull.pull` wraps each listing page and each part download in
:meth:`Backoff.run`; once attempts run out the error stays a
:class:`~processors.storage.errors.TemporaryStorageError` so the control plane requeues the
whole pull later instead of marking the service failed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from processors.storage.errors import TemporaryStorageError

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backoff:
    attempts: int = 5
    first_delay: float = 0.25
    max_delay: float = 8.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based), jittered so parallel
        workers that failed together do not retry together."""
        ceiling = min(self.max_delay, self.first_delay * 2.0 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def run(self, operation: Callable[[], T], stop: threading.Event | None = None) -> T:
        """Call ``operation`` until it succeeds, a permanent error escapes, attempts run out,
        or ``stop`` is set (another worker failed: no point retrying)."""
        for attempt in range(1, self.attempts + 1):
            try:
                return operation()
            except TemporaryStorageError as e:
                if attempt == self.attempts or (stop is not None and stop.is_set()):
                    raise TemporaryStorageError(f"{e} (gave up after {attempt} attempts)") from e
                delay = self.delay(attempt)
                log.warning("%s; retry %d/%d in %.2fs", e, attempt, self.attempts - 1, delay)
                if stop is not None:
                    stop.wait(delay)
                else:
                    time.sleep(delay)
        raise AssertionError("unreachable: attempts must be >= 1")
