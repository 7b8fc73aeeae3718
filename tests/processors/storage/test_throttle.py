"""How many small-file GETs a pull runs at once (processors.storage.throttle)."""

from __future__ import annotations

import math
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from processors.storage.throttle import (
    PROBE_BYTES,
    PROBES,
    WARM_UP,
    StreamProbe,
    Throttle,
    alone,
    concurrency,
    median,
    stream_count,
)

MiB = 1 << 20


@pytest.mark.parametrize(
    "values", [[3.0], [2.0, 1.0], [1.4, 9.0, 1.3], [4.0, 1.0, 3.0, 2.0], [math.inf, 1.0, 2.0]]
)
def test_the_median_is_statistics(values: list[float]) -> None:
    assert median(values) == statistics.median(values)


@pytest.mark.parametrize(
    ("ratios", "limit", "expected"),
    [
        ([1.0, 1.0, 1.0], 8, 2),  # all CPU (nothing to wait for): two, to cover the waits
        ([1.4, 1.3, 1.6], 8, 3),  # a loopback: the stand-in's own time
        ([1.4, 9.0, 1.3], 8, 3),  # one probe preempted: the median ignores it
        ([4.5, 5.0, 4.0], 8, 8),  # OSS's first-byte latency: all the workers
        ([4.5, 5.0, 4.0], 32, 9),
        ([math.inf, math.inf, 1.0], 8, 8),  # a probe that took no measurable CPU
        ([0.5, 0.5, 0.5], 8, 1),  # clocks disagreeing: at least one
        ([1.0, 1.0, 1.0], 1, 1),
    ],
)
def test_concurrency_from_the_probes(ratios: list[float], limit: int, expected: int) -> None:
    assert concurrency(ratios, limit) == expected


@pytest.mark.parametrize(
    ("ratios", "limit", "expected"),
    [
        ([1.0], 8, 1),  # a loopback: the stream kept its CPU busy, it stays alone
        ([1.9], 8, 1),  # waits less than it works: a second would wait for the CPU
        ([2.0], 8, 2),
        ([3.7], 8, 3),
        ([10.0], 8, 8),  # OSS: ~150 MB/s a stream, a tenth of a CPU each
        ([10.0], 4, 4),
        ([math.inf], 8, 8),  # reads that took no measurable CPU
        ([0.8], 8, 1),  # clocks disagreeing: at least one
    ],
)
def test_stream_count_from_the_first_streams_reads(
    ratios: list[float], limit: int, expected: int
) -> None:
    assert stream_count(ratios, limit) == expected


@pytest.mark.parametrize(
    ("probe", "left", "gets", "expected"),
    [
        # One file, read on into: the pace of the reads so far decides.
        ((0.004, 0.004, 4 * MiB, 0.005), 180 * MiB, 0, (0.18, 0.18)),
        # Forty files of 4 MiB: each GET waits 5 ms for OSS (counted twice), reads take 4.
        ((0.004, 0.004, 4 * MiB, 0.005), 160 * MiB, 40, (0.56, 0.16)),
        ((0.004, 0.004, 4 * MiB, 0.005), 0, 0, (0.0, 0.0)),  # nothing left
    ],
)
def test_what_the_work_left_would_take_a_lone_stream(
    probe: tuple[float, float, int, float],
    left: int,
    gets: int,
    expected: tuple[float, float],
) -> None:
    assert alone(*probe, left, gets) == pytest.approx(expected)


def test_a_stream_probe_times_reads_after_each_gets_first() -> None:
    """The first read of each GET (OSS's first byte) is not timed; the rest are, until
    PROBE_BYTES of them decide."""
    throttle = Throttle(8, stream_count, probes=1, warm_up=0)
    probe = StreamProbe(throttle, lambda: (PROBE_BYTES, 0))

    def work() -> None:  # reading at the CPU's pace
        end = time.thread_time() + 0.005
        while time.thread_time() < end:
            pass

    for _ in range(2):  # two GETs: a read waiting for its first byte, then one timed
        with probe.request():
            pass
        time.sleep(0.2)  # the first byte: would make the stream look like it waits
        probe.read(1)
        work()
        probe.read(PROBE_BYTES // 4)
    assert throttle.probing
    work()
    probe.read(PROBE_BYTES // 2)
    assert not throttle.probing and throttle.allowed < 8  # not the 8 that 0.4 s waiting says


def test_a_stream_probe_counts_the_first_byte_waits_of_the_gets_left() -> None:
    throttle = Throttle(8, stream_count, probes=1, warm_up=0)
    probe = StreamProbe(throttle, lambda: (PROBE_BYTES, 40))  # forty small files to go
    with probe.request():
        time.sleep(0.01)  # OSS's first byte
    probe.read(1)
    probe.read(PROBE_BYTES)  # reading at once: the reads alone would say one stream
    assert throttle.allowed == 8


def test_a_throttle_that_widens_says_how_many_more_turns_it_opened() -> None:
    """So that the workers for them start then, not up front to wait for turns."""
    opened: list[int] = []
    wide = Throttle(8, stream_count, probes=1, warm_up=0, widened=opened.append)
    wide.probed(0.03, 0.01)  # waited twice as long as it worked: three streams
    assert (wide.allowed, opened) == (3, [2])
    narrow = Throttle(8, stream_count, probes=1, warm_up=0, widened=opened.append)
    narrow.probed(0.01, 0.01)
    assert (narrow.allowed, opened) == (1, [2])  # no more turns: nothing to hear
    done = Throttle(8, stream_count, probes=1, warm_up=0, widened=opened.append)
    done.close()  # every part taken before the probe decided
    done.probed(0.03, 0.01)
    assert opened == [2]


def run(throttle: Throttle, blocks: int, work: float, busy: bool) -> int:
    """Take ``blocks`` blocks of ``work`` seconds (spinning or sleeping) on 8 workers, each
    taking block after block while it has a turn; the most that ran at once."""
    lock = threading.Lock()
    left = iter(range(blocks))
    running, most, done = 0, 0, 0

    def worker(_: int) -> None:
        nonlocal running, most, done
        with throttle.turn():
            while next(left, None) is not None:
                with throttle.timed():
                    with lock:
                        running += 1
                        most = max(most, running)
                        assert running == 1 or done >= WARM_UP + PROBES, "probes run alone"
                    end = time.perf_counter() + work
                    if busy:
                        while time.perf_counter() < end:
                            pass
                    else:
                        time.sleep(work)
                    with lock:
                        running -= 1
                        done += 1

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(worker, range(8)))
    return most


def test_gets_that_wait_run_side_by_side_and_gets_that_work_do_not() -> None:
    waiting = Throttle(8)
    assert run(waiting, 40, 0.01, busy=False) > 2
    assert waiting.allowed == 8
    working = Throttle(8)
    run(working, 12, 0.005, busy=True)
    # 2 on a free core; more where other processes take the CPU away from the probes (their
    # wall time grows, their CPU time does not), all of it only when they get under a quarter
    assert working.allowed < waiting.allowed


def test_a_failed_get_is_not_a_probe() -> None:
    throttle = Throttle(8)
    with throttle.turn():
        for _ in range(WARM_UP + PROBES - 1):
            with throttle.timed():
                time.sleep(0.002)
        with pytest.raises(RuntimeError), throttle.timed():
            raise RuntimeError("connection reset")
        assert throttle.allowed == 1  # still probing: a failure says nothing of the latency
        with throttle.timed():
            time.sleep(0.002)
    assert throttle.allowed == 8


def test_closing_lets_the_waiting_workers_leave_at_once() -> None:
    throttle = Throttle(8)
    left: list[bool] = []

    def waiter() -> None:
        with throttle.turn() as granted:
            left.append(granted)

    with throttle.turn() as granted:
        assert granted
        threads = [threading.Thread(target=waiter) for _ in range(3)]
        for thread in threads:
            thread.start()
        time.sleep(0.05)
        assert left == []  # one turn while probing: they wait
        throttle.close()
        for thread in threads:
            thread.join(5)
        assert left == [False, False, False]  # without a turn, while this one still holds its
    with throttle.turn() as granted:
        assert not granted
