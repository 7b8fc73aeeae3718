"""The one change signal: a fire from any thread wakes waiters on any event loop, and its
two ways of waiting do not consume each other's wake-ups; a burst's reads spaced out."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from controlplane.store import changes
from controlplane.store.changes import Changes


async def test_a_fire_from_another_thread_wakes_a_waiter() -> None:
    changes = Changes()
    seen = changes.count
    threading.Timer(0.05, changes.fire).start()
    started = time.monotonic()
    await changes.wait_past(seen, 5.0)
    assert changes.count == seen + 1
    assert time.monotonic() - started < 2.0


async def test_a_change_between_read_and_wait_is_not_lost() -> None:
    changes = Changes()
    seen = changes.count
    changes.fire()  # lands after the waiter noted the count, before it waits
    started = time.monotonic()
    await changes.wait_past(seen, 5.0)
    assert time.monotonic() - started < 1.0


async def test_wait_keeps_a_change_made_while_the_loop_was_busy() -> None:
    changes = Changes()
    await changes.wait(0.01)  # this loop now waits on it
    changes.fire()
    started = time.monotonic()
    await changes.wait(5.0)
    assert time.monotonic() - started < 1.0
    # and only once: the next wait waits
    started = time.monotonic()
    await changes.wait(0.2)
    assert time.monotonic() - started >= 0.2


async def test_the_two_waits_do_not_consume_each_others_wake_up() -> None:
    changes = Changes()
    await changes.wait(0.01)
    changes.fire()
    await changes.wait_past(changes.count, 0.01)  # clears its own event, not wait's
    started = time.monotonic()
    await changes.wait(5.0)
    assert time.monotonic() - started < 1.0


async def test_a_timeout_returns_without_a_change() -> None:
    changes = Changes()
    started = time.monotonic()
    await changes.wait_past(changes.count, 0.1)
    await changes.wait(0.1)
    assert time.monotonic() - started >= 0.2
    assert changes.count == 0


def test_waiters_on_two_loops_both_wake() -> None:
    changes = Changes()
    woke: list[float] = []

    def waiter() -> None:
        async def run() -> None:
            await changes.wait_past(0, 5.0)
            woke.append(time.monotonic())

        asyncio.run(run())

    threads = [threading.Thread(target=waiter) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    fired = time.monotonic()
    changes.fire()
    for t in threads:
        t.join(5.0)
    assert len(woke) == 2
    assert all(w - fired < 2.0 for w in woke)


@pytest.mark.parametrize(
    ("last", "now", "gap", "delay"),
    [
        (float("-inf"), 100.0, 0.05, 0.0),  # the first read: at once
        (100.0, 101.0, 0.05, 0.0),  # after a quiet spell: at once
        (100.0, 100.05, 0.05, 0.0),  # exactly one gap later
        (100.0, 100.01, 0.05, 0.04),  # in a burst: the rest of the gap
        (100.0, 100.0, 0.05, 0.05),
    ],
)
def test_spacing_delay(last: float, now: float, gap: float, delay: float) -> None:
    assert changes.spacing_delay(last, now, gap) == pytest.approx(delay)


async def test_spacing_reads_a_burst_together() -> None:
    spacing = changes.Spacing(0.2)
    started = time.monotonic()
    await spacing.turn()  # a lone change: no wait
    assert time.monotonic() - started < 0.1
    await spacing.turn()  # the next, in the same burst: waits out the gap
    assert time.monotonic() - started >= 0.19
