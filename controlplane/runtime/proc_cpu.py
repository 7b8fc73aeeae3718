"""CPU use of local replicas from ``/proc``: each replica is a process tree (``openeas
processor run`` → ``tritonserver`` → python-backend stubs), so its use is the sum over the
tree. Called by the local runtime for the autoscaler's ``cpu`` metric (Linux only; elsewhere
there is no value)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in (PROC / str(pid) / "task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def _own_seconds(pid: int) -> float:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0  # gone meanwhile
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds used so far by ``pid`` and its live descendants; None without /proc."""
    if not (PROC / str(pid)).exists():
        return None
    total, queue = 0.0, [pid]
    while queue:
        p = queue.pop()
        total += _own_seconds(p)
        queue += _children(p)
    return total


class CpuRates:
    """Cores in use per replica: the change in CPU seconds over the wall time since the
    previous reading of the same process (a restarted replica starts over)."""

    def __init__(
        self,
        read: Callable[[int], float | None] = tree_cpu_seconds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._clock = clock
        # service → replica → (pid, at, seconds)
        self._last: dict[str, dict[str, tuple[int, float, float]]] = {}

    def cores(self, service: str, pids: Mapping[str, int]) -> list[float]:
        """Per replica of ``service`` (name → pid) read last time and now."""
        now = self._clock()
        out = []
        last = self._last.get(service, {})
        current: dict[str, tuple[int, float, float]] = {}
        self._last[service] = current
        for name, pid in pids.items():
            used = self._read(pid)
            if used is None:
                continue
            current[name] = (pid, now, used)
            before = last.get(name)
            if before is not None and before[0] == pid and now > before[1]:
                out.append(max(0.0, used - before[2]) / (now - before[1]))
        return out
