"""CPU use of a local replica's process tree, from /proc: rates from cumulative seconds
(fake readings), and the seconds of a real child that burns CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from controlplane.runtime.proc_cpu import CpuRates, tree_cpu_seconds

BURN = (
    "import time\n"
    "start = time.process_time()\n"
    "while time.process_time() - start < 0.5:\n"
    "    pass\n"
    "time.sleep(60)\n"
)


def test_rates_per_replica_and_a_restart_starts_over() -> None:
    now = [0.0]
    used = {11: 5.0, 22: 1.0}
    rates = CpuRates(read=used.get, clock=lambda: now[0])
    assert rates.cores("svc", {"svc-0": 11, "svc-1": 22}) == []
    now[0], used[11], used[22] = 2.0, 6.0, 4.0
    assert rates.cores("svc", {"svc-0": 11, "svc-1": 22}) == [0.5, 1.5]
    now[0], used[33] = 3.0, 9.0  # svc-1 restarted as pid 33: no rate until next time
    assert rates.cores("svc", {"svc-0": 11, "svc-1": 33}) == [0.0]
    assert rates.cores("other", {"other-0": 99}) == []  # gone: no reading, no value


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_tree_counts_its_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        deadline = time.monotonic() + 20
        # /proc counts in clock ticks: 0.5 s burnt reads as at least 0.3 s, whatever the
        # rounding and the other processes on the machine.
        while (tree_cpu_seconds(child.pid) or 0.0) < 0.3:
            assert time.monotonic() < deadline, "the child did not burn its CPU"
            time.sleep(0.05)
        assert (tree_cpu_seconds(os.getpid()) or 0.0) >= 0.3  # ours includes the child's
    finally:
        child.kill()
        child.wait()
    assert tree_cpu_seconds(child.pid) is None
