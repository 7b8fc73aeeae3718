"""The threads a pull fetches on, started as the work calls for them.

A pull's fetches run as tasks that take file after file, or part after part, while a
:class:`~processors.storage.throttle.Throttle` gives them a turn. Most pulls end with one or
a few turns (a big file on a fast link: one stream; small files on a loopback: two or three
GETs), so a thread per worker started up front was mostly threads that started, waited for a
turn that never came and were woken to end, each a part of a pull's fixed cost, most of
them for one big file. A :class:`Crew` runs one task of each kind at first, one of
them on the calling thread (one big file on a fast link starts no thread at all), and another
on a thread of its own for each turn a throttle opens (``Throttle(..., widened=)``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from processors.storage.errors import PermanentStorageError

Task = Callable[[threading.Event], None]  # runs until its work is done or the event is set


class Crew:
    """Tasks on this thread and up to ``threads`` others (tasks beyond wait for one to
    end): the first failure stops the rest (its task sets :attr:`stop`), and is raised."""

    def __init__(self, threads: int) -> None:
        self.stop = threading.Event()
        self._threads = threads
        self._pool = ThreadPoolExecutor(max(1, threads), "oss-pull")
        self._futures: list[Future[None]] = []
        self._lock = threading.Lock()

    def start(self, task: Task, count: int = 1) -> None:
        """Run ``count`` more of ``task`` on threads (from any thread, a running task's
        too); none once stopped."""
        with self._lock:
            if not self.stop.is_set():
                self._futures += [self._pool.submit(self._guarded, task) for _ in range(count)]

    def run(self, tasks: Sequence[Task]) -> None:
        """Run ``tasks``, the last on this thread and the others on threads (with none to
        spare, one after another here); return once they and those started meanwhile have
        ended. Of several failures, what the user must fix is raised before what a retry
        might fix; an interruption as it came."""
        *others, here = [*tasks] or [_idle]
        if not self._threads:
            others, here = [], _in_turn(tasks)
        for task in others:
            self.start(task)
        failed: list[BaseException] = []
        try:
            self._guarded(here)
        except Exception as e:
            failed.append(e)
        finally:
            self._join()
        ended = [f for f in self._futures if not f.cancelled()]
        failed += [error for f in ended if (error := f.exception()) is not None]
        if failed:
            raise next((e for e in failed if isinstance(e, PermanentStorageError)), failed[0])

    def _guarded(self, task: Task) -> None:
        try:
            task(self.stop)
        except BaseException:
            self._halt()  # the others need not go on: running parts stop at their next chunk
            raise

    def _join(self) -> None:
        """Wait for the tasks started until none is left to start another (each failure has
        stopped the rest); interrupted, stop them and wait for them all the same."""
        try:
            while True:
                with self._lock:
                    started = list(self._futures)
                wait(started)
                with self._lock:
                    if len(self._futures) == len(started):
                        break
        finally:
            self._halt()
            for future in self._futures:
                future.cancel()
            self._pool.shutdown(wait=True)

    def _halt(self) -> None:
        with self._lock:  # so that no task starts after
            self.stop.set()


def _idle(_stop: threading.Event) -> None:
    """Nothing to fetch here (everything unchanged, or only a helper process's share)."""


def _in_turn(tasks: Sequence[Task]) -> Task:
    def each(stop: threading.Event) -> None:
        for task in tasks:
            task(stop)

    return each
