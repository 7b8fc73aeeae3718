"""How far a replica's model pull is, for people waiting on it.

The pull (:mod:`processors.storage.pull`) feeds a :class:`Meter` as bytes arrive; the meter
hands a :class:`contract.progress.Progress` to a sink at most every ``interval`` seconds,
and once at the end. The sink is a small JSON file named by ``OPENEAS_PROGRESS_FILE`` (the
local runtime sets it per replica and reads it on its readiness probe, so an idle replica
costs nothing) or, without it (``openeas processor pull`` in a Kubernetes init container),
a line on stderr every few seconds that ends in the fields as JSON
(:func:`contract.progress.log_line`: the Kubernetes runtime reads the tail of that log while
the pull runs). The runtime publishes the fields in the replica's status
(``eascmd desc``, the console).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from contract.progress import Progress, log_line
from processors.doorbell import Doorbell

ENV_FILE = "OPENEAS_PROGRESS_FILE"

Sink = Callable[[Progress], None]


class Meter:
    """Counts a pull's bytes and files from its worker threads and reports to ``sink`` at
    most every ``interval`` seconds (and at :meth:`finish`), so reporting costs no more than
    a clock read per chunk (the counts are plain numbers until a report is made of them)."""

    def __init__(
        self,
        sink: Sink,
        *,
        files_total: int,
        bytes_total: int,
        files_done: int = 0,
        bytes_done: int = 0,
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sink = sink
        self._clock = clock
        self._interval = interval
        self._lock = threading.Lock()
        self._started = clock()
        self._last = float("-inf")
        self._fetched = 0
        self._rate = 0.0
        self._files_done, self._bytes_done = files_done, bytes_done
        self._files_total, self._bytes_total = files_total, bytes_total
        self._report()

    @property
    def fetched(self) -> int:
        """Bytes this pull downloaded (not reused)."""
        return self._fetched

    def add(self, n: int, files: int = 0) -> None:
        """``n`` more bytes fetched, and ``files`` more files done."""
        with self._lock:
            self._fetched += n
            self._bytes_done += n
            self._files_done += files
            if self._clock() - self._last >= self._interval:
                self._report()

    def file_done(self) -> None:
        self.add(0, files=1)

    def finish(self) -> None:
        with self._lock:
            self._files_done = self._files_total
            self._report(done=True)

    def _report(self, done: bool = False) -> None:
        now = self._clock()
        self._last = now
        eta: float | None = 0.0
        if not done:  # the rate stays the last one measured while pulling
            elapsed = now - self._started
            self._rate = self._fetched / elapsed if elapsed > 0 and self._fetched else 0.0
            left = self._bytes_total - self._bytes_done
            eta = left / self._rate if self._rate else None
        self._sink(
            Progress(
                "pulled" if done else "pulling",
                self._files_done,
                self._files_total,
                self._bytes_done,
                self._bytes_total,
                self._rate,
                eta,
            )
        )


def sink_from(environ: Mapping[str, str]) -> Sink:
    """The file named by ``OPENEAS_PROGRESS_FILE``, else a line on stderr every few
    seconds (a Kubernetes init container's log)."""
    target = environ.get(ENV_FILE)
    if target:
        return _FileSink(Path(target), Doorbell.from_env(environ))
    return _Throttled(lambda p: print(log_line(p), file=sys.stderr, flush=True))


class _FileSink:
    """Writes each report to the file, and rings the runtime's doorbell on a new phase (it
    reads the file then, not at its next probe)."""

    def __init__(self, path: Path, bell: Doorbell) -> None:
        self.path, self.bell = path, bell
        self._phase: str | None = None

    def __call__(self, progress: Progress) -> None:
        write_file(self.path, progress)
        if progress.phase != self._phase:
            self._phase = progress.phase
            self.bell.ring()


class _Throttled:
    def __init__(self, sink: Sink, every: float = 5.0) -> None:
        self._sink, self._every, self._last = sink, every, float("-inf")

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        if progress.phase != "pulling" or now - self._last >= self._every:
            self._last = now
            self._sink(progress)


def write_file(path: Path, progress: Progress) -> None:
    """Replace ``path`` atomically: a reader sees the old or the new report, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(progress.as_dict()))
    os.replace(tmp, path)


def read_file(path: Path) -> Progress | None:
    try:
        return Progress.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None  # not written yet (or by a different version): nothing to show
