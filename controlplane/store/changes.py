"""The one change signal of the control plane: what was committed, and who waits for it.

Commits in this process are announced by SQLAlchemy hooks (``route_feed.install``,
``service_watch.install``) through a :class:`Changes`, from whichever thread committed:
:data:`ROUTES` when a commit changed routing (the route feed's long-polls and the
reconciler wait on it), :data:`SERVICES` when a commit wrote a service (the service
long-polls wait on it). Commits in other processes are not announced; the pollers for them
ask :func:`commit_watch` first, and read only when something may have been committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

Events = weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event]


class Changes:
    """How many commits in this process made one kind of change; waiters on any event loop
    wake when it moves. Fired from any thread (the API and the reconciler commit in worker
    threads). Its two ways of waiting keep events of their own, so neither consumes a
    wake-up meant for the other."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._pending: Events = weakref.WeakKeyDictionary()  # for wait: set until it returns
        self._moved: Events = weakref.WeakKeyDictionary()  # for wait_past: cleared per wait

    def fire(self) -> None:
        with self._lock:
            self.count += 1
        for events in (self._pending, self._moved):
            for loop, event in list(events.items()):
                if not loop.is_closed():
                    loop.call_soon_threadsafe(event.set)

    async def wait(self, timeout: float) -> None:
        """Return on the next change, or after ``timeout`` seconds. A change since this
        event loop's last ``wait`` returned counts: a loop busy between waits loses none."""
        pending = self._pending.setdefault(asyncio.get_running_loop(), asyncio.Event())
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that
        # arrives as the event is set, and a loop waiting here would then never stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await pending.wait()
        pending.clear()

    async def wait_past(self, seen: int, timeout: float) -> None:
        """Until :attr:`count` is past ``seen``, or ``timeout`` seconds. A waiter notes the
        count before it reads, so a commit landing between its read and its wait is not
        lost."""
        moved = self._moved.setdefault(asyncio.get_running_loop(), asyncio.Event())
        moved.clear()  # before the check: a fire after it sets the event again
        if self.count != seen:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await moved.wait()


def spacing_delay(last: float, now: float, gap: float) -> float:
    """How long a read that was last made at ``last`` waits at ``now`` to keep ``gap``
    seconds between reads: nothing after a quiet spell, the rest of the gap in a burst."""
    return max(0.0, last + gap - now)


# A burst's reads of what changed (the route feed's counter, the reconciler's pending
# services): at most one per this many seconds; a lone commit is read at once.
BURST_GAP_S = 0.05


class Spacing:
    """Reads of what commits changed, at most one per ``gap`` seconds: the first change
    after a quiet spell is read at once (no latency added), the changes of a burst wait out
    the rest of the gap and are read together, one read for all of them."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self._last = float("-inf")

    async def turn(self) -> None:
        delay = spacing_delay(self._last, time.monotonic(), self.gap)
        if delay > 0:
            await asyncio.sleep(delay)
        self._last = time.monotonic()


ROUTES = Changes()  # commits that changed routing (the route version moved)
SERVICES = Changes()  # commits that wrote a service row


def commit_watch(sessions: sessionmaker[Session]) -> Callable[[], bool]:
    """A poll for other processes' commits asks this first: False when nothing was committed
    to the database since its last call, True when something may have been (on its first
    call, and always but for a SQLite file). Idle, a poll then costs a call of microseconds
    on the event loop instead of a session's read in a worker thread."""
    engine = sessions.kw["bind"]
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return _always
    return DataVersion(database)


def _always() -> bool:
    return True


class DataVersion:
    """SQLite's ``PRAGMA data_version`` on a connection of its own that never writes: it
    moves with every commit of any other connection, this process's included (a read of
    the WAL index, no lock waited for). An error says "may have changed": the poll reads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._seen: int | None = None

    def __call__(self) -> bool:
        try:
            if self._conn is None:
                # timeout=0: busy (a WAL being recovered) is an error, not a wait on the loop
                self._conn = sqlite3.connect(
                    self.path, timeout=0, isolation_level=None, check_same_thread=False
                )
            now: int = self._conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            self._seen = None
            return True
        changed = now != self._seen
        self._seen = now
        return changed
