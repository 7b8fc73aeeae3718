"""The threads a pull fetches on (processors.storage.crew): started only as the work calls
for them, the caller's among them, and stopped together at the first failure."""

from __future__ import annotations

import threading

import pytest

from processors.storage import PermanentStorageError, TemporaryStorageError
from processors.storage.crew import Crew


class Seen:
    """Tasks that note the thread they ran on (and, given ``together``, wait for that many
    of them to run at once)."""

    def __init__(self, together: int = 1) -> None:
        self.threads: list[threading.Thread] = []
        self._together = threading.Barrier(together)

    def task(self, _stop: threading.Event) -> None:
        self.threads.append(threading.current_thread())
        self._together.wait(5)


def test_the_last_task_runs_on_the_calling_thread_the_others_on_threads() -> None:
    seen = Seen()
    Crew(4).run([seen.task])
    assert seen.threads == [threading.current_thread()]
    seen = Seen(together=3)
    Crew(4).run([seen.task, seen.task, seen.task])
    assert threading.current_thread() in seen.threads and len(set(seen.threads)) == 3


def test_without_threads_to_spare_the_tasks_run_in_turn_here() -> None:
    seen = Seen()
    Crew(0).run([seen.task, seen.task])
    assert seen.threads == [threading.current_thread()] * 2


def test_nothing_to_run_is_done_at_once() -> None:
    Crew(2).run([])


def test_tasks_started_by_tasks_are_waited_for() -> None:
    crew = Crew(4)
    done: list[int] = []
    release = threading.Event()

    def later(_stop: threading.Event) -> None:
        release.wait(5)
        done.append(2)

    def first(_stop: threading.Event) -> None:
        crew.start(later, 2)  # as a throttle does when it opens more turns
        done.append(1)

    threading.Timer(0.1, release.set).start()
    crew.run([first])
    assert done == [1, 2, 2]


@pytest.mark.parametrize("failing", ["here", "on a thread"])
def test_the_first_failure_stops_the_rest_and_is_raised(failing: str) -> None:
    crew = Crew(2)
    stopped = threading.Event()

    def waits(stop: threading.Event) -> None:
        assert stop.wait(5), "never stopped"
        stopped.set()

    def fails(_stop: threading.Event) -> None:
        raise TemporaryStorageError("connection reset")

    tasks = [waits, fails] if failing == "here" else [fails, waits]
    with pytest.raises(TemporaryStorageError, match="connection reset"):
        crew.run(tasks)
    assert stopped.is_set()
    crew.start(waits)  # stopped: nothing more starts
    assert crew.stop.is_set()


def test_what_the_user_must_fix_is_raised_before_what_a_retry_might() -> None:
    both = threading.Barrier(2)

    def temporary(_stop: threading.Event) -> None:
        both.wait(5)
        raise TemporaryStorageError("try again")

    def permanent(_stop: threading.Event) -> None:
        both.wait(5)
        raise PermanentStorageError("access denied")

    for tasks in ([temporary, permanent], [permanent, temporary]):
        both.reset()
        with pytest.raises(PermanentStorageError, match="access denied"):
            Crew(2).run(tasks)
