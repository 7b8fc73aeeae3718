"""A background task's crash is not lost at teardown (tests/tasks.py)."""

from __future__ import annotations

import asyncio

import pytest

from tests.tasks import stop


async def test_a_crashed_task_fails_the_test() -> None:
    async def crash() -> None:
        raise RuntimeError("the loop died")

    task = asyncio.create_task(crash())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="the loop died"):
        await stop(task)


async def test_a_task_cancelled_at_teardown_is_not_a_failure() -> None:
    task = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    await stop(task, asyncio.create_task(asyncio.sleep(0)))
    assert task.cancelled()
