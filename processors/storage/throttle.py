"""How many fetches a pull runs at once: small-file GETs, and big files' ranged streams.

A small file's GET is mostly Python work (signing, parsing the answer) under the one
interpreter lock, then a wait for OSS. More GETs in flight than it takes to keep the lock
busy during those waits only make the threads hand the lock back and forth, at more CPU
per file (docs/performance.md). How many that is depends on OSS's
latency: a :class:`Throttle` lets one worker fetch the first files alone, times their GETs,
and from then on lets :func:`concurrency` workers fetch (2 or 3 on a loopback, all of them
at OSS's few milliseconds).

A big file's stream (:mod:`~processors.storage.runs`) is copying: its CPU goes to taking
bytes from the socket, checksumming and writing them. Where one stream keeps its CPU busy
(a loopback, a fast link) more only split that CPU, and cost more of it; where it waits
on the network (OSS's per-stream rate is below a link's) more streams fill the link. So the
first stream runs alone, and its steady state says how many follow (:func:`stream_count`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

WARM_UP = 1  # the first GET also opens the connection (a TLS handshake, on OSS): not timed
PROBES = 3  # GETs then timed alone; the median is taken, so one hiccup does not count

Decide = Callable[[list[float], int], int]  # probes' wall/CPU ratios, limit -> how many


def concurrency(ratios: list[float], limit: int) -> int:
    """GETs in flight from probes' wall time over CPU time (``ratios``): while one GET
    works, the others wait out the rest of its wall time, so the median ratio of them keep
    one thread's worth of CPU busy. Twice that, since the probes ran alone: in company each
    GET also waits its turn for the lock, and OSS's latency varies. 1 to ``limit``."""
    return max(1, math.ceil(min(limit, 2 * median(ratios))))


def stream_count(ratios: list[float], limit: int) -> int:
    """Ranged streams from a first stream's wall time over CPU time reading (``ratios``,
    the median taken): as many whole streams as one CPU carries without them waiting for
    it, so a stream that works more than it waits stays alone (on a loopback one waits
    for the server's CPU about a third of its time: a second would take that CPU away).
    1 to ``limit``."""
    ratio = median(ratios)
    return limit if math.isinf(ratio) else max(1, min(limit, math.floor(ratio)))


def median(values: list[float]) -> float:
    """As ``statistics.median`` (the mean of the middle two of an even count), without its
    import: ``fractions`` and ``decimal``, a few ms of every pull process's start."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


class Throttle:
    """Turns for the workers: each holds one while it takes file after file, or run after
    run (so a file ends without handing a turn to another thread). Until ``probes`` are
    timed (:meth:`timed` around a GET, or :meth:`probed`), after the first ``warm_up``,
    one turn; then as many as ``decide`` says, up to ``limit``, and ``widened`` hears how
    many more that is (to start workers for them, rather than keep them waiting). After
    :meth:`close` (no work left to start), the workers still waiting leave without one."""

    def __init__(
        self,
        limit: int,
        decide: Decide = concurrency,
        probes: int = PROBES,
        warm_up: int = WARM_UP,
        widened: Callable[[int], None] | None = None,
    ) -> None:
        self._limit = limit
        self._decide = decide
        self._probes = probes
        self._warm_up = warm_up
        self._widened = widened
        self._allowed = 1
        self._running = 0
        self._seen = 0  # probes reported, the warm-up's among them
        self._ratios: list[float] = []
        self._closed = False
        self._turn = threading.Condition()

    @property
    def allowed(self) -> int:
        return self._allowed

    @property
    def probing(self) -> bool:
        return len(self._ratios) < self._probes

    @contextmanager
    def turn(self) -> Iterator[bool]:
        """Wait for a turn and hold it while the block runs (``True``), or until closed
        (``False``, holding none)."""
        with self._turn:
            self._turn.wait_for(lambda: self._running < self._allowed or self._closed)
            granted = not self._closed
            self._running += granted
        if not granted:
            yield False
            return
        try:
            yield True
        finally:
            with self._turn:
                self._running -= 1
                self._turn.notify()

    def close(self) -> None:
        """No more turns: the workers waiting for one leave at once (not one after another,
        each waking the next as it finds nothing to do)."""
        with self._turn:
            self._closed = True
            self._turn.notify_all()

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Time one GET, while probing (one that fails says nothing of the latency)."""
        if not self.probing:
            yield
            return
        wall, cpu = time.perf_counter(), time.thread_time()
        yield
        self.probed(time.perf_counter() - wall, time.thread_time() - cpu)

    def probed(self, wall: float, cpu: float) -> None:
        """One probe took ``wall`` seconds, ``cpu`` of them its thread's CPU time."""
        with self._turn:
            self._seen += 1
            if self._seen <= self._warm_up or not self.probing:
                return
            self._ratios.append(wall / cpu if cpu > 0 else math.inf)
            if self.probing:
                return
            before, self._allowed = self._allowed, self._decide(self._ratios, self._limit)
            # Wake only as many waiters as may now run: a woken thread that must wait
            # again costs two context switches and a turn of the lock for nothing.
            self._turn.notify(self._allowed - before)
            more = 0 if self._closed else self._allowed - before
        if more > 0 and self._widened is not None:
            self._widened(more)


PROBE_BYTES = 4 << 20  # a stream's reads timed for a decision: a few chunks
PROBE_SECONDS = 0.1  # or this long, on a slow link


def alone(
    wall: float, cpu: float, read: int, latency: float, left: int, gets: int
) -> tuple[float, float]:
    """A lone stream's wall and CPU time for the work left: ``left`` bytes at the pace of
    its reads so far (``read`` bytes in ``wall`` seconds, ``cpu`` of them CPU), and ``gets``
    more GETs (one per file or gap it does not read on into) each waiting ``latency`` for
    OSS's first byte: many files a few MiB each wait more than they read. The waits count
    twice, as the small files' probes do (:func:`concurrency`): in company, a GET's wait
    hides behind other streams' reads only where one is ready, and OSS's latency varies."""
    scale = left / read if read else 0.0
    return wall * scale + 2 * gets * latency, cpu * scale


class StreamProbe:
    """Times a stream's GETs for a :class:`Throttle` while it probes: OSS's wait for a first
    byte (:meth:`request`) and the reads (with the checksum and write of each), until
    :data:`PROBE_BYTES` or :data:`PROBE_SECONDS` of them, from the second read of each GET
    (the first waits for the first byte). ``outlook`` says the bytes and GETs left; the
    throttle decides on what they would take a lone stream (:func:`alone`). Time the thread
    spent ready but waiting for a CPU (other processes': not the network's) does not count
    as waiting."""

    def __init__(self, throttle: Throttle, outlook: Callable[[], tuple[int, int]]) -> None:
        self._throttle = throttle
        self._outlook = outlook
        self._mark: tuple[float, float, float] | None = None
        self._wall = self._cpu = 0.0
        self._bytes = 0
        self._latency = math.inf

    @contextmanager
    def request(self) -> Iterator[None]:
        """Around sending a GET and reading its answer's head; the next read is not timed."""
        self._mark = None
        if not self._throttle.probing:
            yield
            return
        before = _clocks()
        yield
        wall, cpu, waited = (a - b for a, b in zip(_clocks(), before, strict=True))
        # The least seen: the first GET also connects (and shakes hands, on OSS).
        self._latency = min(self._latency, max(0.0, wall - cpu - waited))

    def read(self, size: int) -> None:
        """``size`` bytes were read (and handled) since the last call."""
        if not self._throttle.probing:
            return
        now = _clocks()
        if self._mark is not None:
            self._wall += (now[0] - self._mark[0]) - (now[2] - self._mark[2])
            self._cpu += now[1] - self._mark[1]
            self._bytes += size
            if self._bytes >= PROBE_BYTES or self._wall >= PROBE_SECONDS:
                latency = 0.0 if math.isinf(self._latency) else self._latency
                left, gets = self._outlook()
                self._throttle.probed(
                    *alone(self._wall, self._cpu, self._bytes, latency, left, gets)
                )
        self._mark = now


def _clocks() -> tuple[float, float, float]:
    return time.perf_counter(), time.thread_time(), cpu_wait()


def cpu_wait() -> float:
    """Seconds this thread has been ready to run but waiting for a CPU (Linux's schedstat;
    0 where there is none)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
