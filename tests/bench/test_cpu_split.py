"""The benches' CPU accounting (``bench/deploy.py``, read by ``bench/gateway.py``):
`openeas up` holds its replicas as descendants, so its row splits the platform's own CPU
(gateway and control plane) from its replica's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from bench.deploy import cpu_split, proxy_user_seconds

# A parent that spins 0.3 s of CPU, then waits on a child that spins 0.9 s and sleeps on
# (alive, so its CPU is its own, not yet folded into the parent's on exit).
FAMILY = """
import subprocess, sys, time
def spin(s):
    end = time.process_time() + s
    while time.process_time() < end:
        pass
spin(0.3)
child = subprocess.Popen([sys.executable, "-c",
    "import time\\nend = time.process_time() + 0.9\\nwhile time.process_time() < end: pass\\n"
    "print('spun', flush=True)\\ntime.sleep(60)"], stdout=subprocess.PIPE)
child.stdout.readline()
print("ready", flush=True)
time.sleep(60)
"""


def test_a_platform_row_counts_its_replicas_apart_from_itself() -> None:
    family = subprocess.Popen(
        [sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert family.stdout is not None and family.stdout.readline() == "ready\n"
        replicas, platform = cpu_split(0, None, family.pid)
        assert 0.25 <= platform < 0.6  # the parent's own spin (and its start-up)
        assert 0.85 <= replicas < 1.3  # the child's spin, not the parent's
        # Any other target: Triton's process tree, and the proxy's apart from it.
        triton, proxy = cpu_split(family.pid, family.pid, None)
        assert triton >= replicas + platform - 0.05 and proxy == triton
        triton, proxy = cpu_split(family.pid, None, None)
        assert proxy == 0.0
        # The user part of a proxy's, counted the same way: the spins read the process's
        # clock, a system call each, so part of their time is the system's.
        own_user = proxy_user_seconds(None, family.pid)
        assert 0.0 < own_user < platform
        assert own_user < proxy_user_seconds(family.pid, None) < triton
        assert proxy_user_seconds(None, None) == 0.0
    finally:
        os.killpg(family.pid, signal.SIGKILL)  # the child too
        family.wait()
