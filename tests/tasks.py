"""Stopping a test's background tasks without hiding how they ended."""

from __future__ import annotations

import asyncio
from typing import Any


async def stop(*tasks: asyncio.Task[Any]) -> None:
    """Cancel ``tasks`` and wait for them. A task that had ended by an exception of its own
    (a crash, not the cancellation) fails the test with it, where
    ``gather(..., return_exceptions=True)`` would drop it."""
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    crashed = [
        r
        for r in results
        if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
    ]
    if len(crashed) == 1:
        raise crashed[0]
    if crashed:
        raise BaseExceptionGroup("background tasks crashed", crashed)
