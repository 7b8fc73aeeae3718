"""Which parts of the big files each ranged stream reads.

A part (:class:`~processors.storage.partial.Partial`) is what is verified and kept for a
resumed pull; a stream is one GET over a run of consecutive parts of one file, going on into
the next part while no other stream has taken it. So one stream alone reads a whole file in
one GET, and a stream opened later splits the work left (:func:`start`): the one reading
the part before stops where the new one begins. :func:`processors.storage.pull.pull` asks
:class:`Claims` where each stream starts and whether it may go on; how many streams run at
once is :mod:`~processors.storage.throttle`'s to say.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    """Consecutive parts of one file that no stream has taken."""

    file: int  # index of the file
    first: int  # index of its first part
    parts: int
    part_size: int
    headed: bool  # a stream reads the part before it, and will go on into it

    @property
    def size(self) -> int:
        return self.parts * self.part_size


def start(runs: Sequence[Run]) -> tuple[int, int] | None:
    """Where a new stream starts, ``(file, part)``: the largest run no stream is heading
    into, at its first part; else the largest one is, from its middle part (that stream
    reads the first half). ``None`` when every part is taken."""
    free = [r for r in runs if not r.headed]
    if free:
        run = max(free, key=lambda r: r.size)  # the first of equals: biggest files first
        return run.file, run.first
    if runs:
        run = max(runs, key=lambda r: r.size)
        return run.file, run.first + run.parts // 2
    return None


class Claims:
    """The parts streams have taken, per file, and the part each stream is reading."""

    def __init__(self, pending: Sequence[Sequence[int]], part_sizes: Sequence[int]) -> None:
        """``pending``: per file, the indexes of its parts to fetch; ``part_sizes``: its
        part size (only to weigh runs)."""
        self._free = [set(p) for p in pending]
        self._part_sizes = part_sizes
        self._reading: set[tuple[int, int]] = set()  # (file, part) a stream is in
        self._lock = threading.Lock()

    def begin(self) -> tuple[int, int] | None:
        """Take the part a new stream starts at, ``(file, part)`` (``None``: all taken)."""
        with self._lock:
            where = start(self._runs())
            if where is not None:
                self._take(*where)
            return where

    def advance(self, file: int, part: int) -> bool:
        """The stream reading ``part - 1`` goes on into ``part``, if no other took it
        (else it stops there, as if by :meth:`end`)."""
        with self._lock:
            self._reading.discard((file, part - 1))
            if part not in self._free[file]:
                return False
            self._take(file, part)
            return True

    def end(self, file: int, part: int) -> None:
        """The stream reading ``part`` stops after it."""
        with self._lock:
            self._reading.discard((file, part))

    def outlook(self) -> tuple[int, int]:
        """The bytes no stream has taken, and the GETs a lone stream would still send for
        them (one per run it does not read on into)."""
        with self._lock:
            runs = self._runs()
            return sum(r.size for r in runs), sum(not r.headed for r in runs)

    def reach(self, file: int, part: int) -> int:
        """The last part the stream in ``part`` may read on to, as things stand (the end
        of the range to ask OSS for)."""
        with self._lock:
            return self._last(file, part)

    def _take(self, file: int, part: int) -> None:
        self._free[file].remove(part)
        self._reading.add((file, part))

    def _runs(self) -> list[Run]:
        runs = []
        for file, free in enumerate(self._free):
            for first in sorted(p for p in free if p - 1 not in free):
                runs.append(self._run(file, first, self._last(file, first)))
        return runs

    def _last(self, file: int, part: int) -> int:
        while part + 1 in self._free[file]:
            part += 1
        return part

    def _run(self, file: int, first: int, last: int) -> Run:
        headed = (file, first - 1) in self._reading
        return Run(file, first, last - first + 1, self._part_sizes[file], headed)
