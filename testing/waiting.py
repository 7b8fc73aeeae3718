"""Polling with a deadline, for tests that wait on something another thread or process does.

Tests never sleep and then check once: they poll the condition until it holds or a generous
deadline passes, so they are fast when things are fine and robust on a loaded machine.
:func:`wait_until` (threads, processes) and :func:`wait_until_async` (inside an event loop)
return the condition's first truthy value, or fail with ``what`` and the last value seen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0


class WaitTimeout(AssertionError):
    """The condition did not hold before the deadline."""


def wait_until(
    condition: Callable[[], T | None],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = 0.02,
    what: str = "",
) -> T:
    """Poll ``condition()`` until it returns something truthy; returns that value (so never
    None: a condition that answers ``X | None`` gives an ``X``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(_message(condition, timeout, what, value))
        time.sleep(interval)


@overload
async def wait_until_async(
    condition: Callable[[], Awaitable[T | None]],
    timeout: float = ...,
    *,
    interval: float = ...,
    what: str = ...,
) -> T: ...


@overload
async def wait_until_async(
    condition: Callable[[], T | None],
    timeout: float = ...,
    *,
    interval: float = ...,
    what: str = ...,
) -> T: ...


async def wait_until_async(
    condition: Callable[[], Any],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = 0.02,
    what: str = "",
) -> Any:
    """:func:`wait_until` for a coroutine; ``condition`` may be sync or async."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(_message(condition, timeout, what, value))
        await asyncio.sleep(interval)


def seconds_until(
    condition: Callable[[], object], timeout: float = DEFAULT_TIMEOUT, *, what: str = ""
) -> float:
    """Seconds :func:`wait_until` took for ``condition`` to hold."""
    started = time.monotonic()
    wait_until(condition, timeout, what=what)
    return time.monotonic() - started


def _message(condition: object, timeout: float, what: str, last: object) -> str:
    name = what or getattr(condition, "__qualname__", repr(condition))
    return f"not within {timeout:g} s: {name} (last value: {last!r:.500})"
