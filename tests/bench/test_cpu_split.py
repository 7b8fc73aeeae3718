"""The benches' CPU accounting (``bench/deploy.py``'s ``Meter``, read by
``bench/gateway.py``): `openeas up` holds its replicas as descendants, so its row splits the
platform's own CPU (gateway and control plane) from its replica's, and a proxy put in front
of those replicas (nginx, on the same Triton) counts them as its Triton."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from bench.deploy import Meter

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


def test_a_platform_row_counts_its_replicas_apart_from_itself_and_any_proxy() -> None:
    family = subprocess.Popen(
        [sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert family.stdout is not None and family.stdout.readline() == "ready\n"
        replicas, platform, own_user = Meter(platform=family.pid).seconds()
        assert 0.25 <= platform < 0.6  # the parent's own spin (and its start-up)
        assert 0.85 <= replicas < 1.3  # the child's spin, not the parent's
        # The user part of it: the spins read the process's clock, a system call each, so
        # part of their time is the system's.
        assert 0.0 < own_user < platform
        # Another proxy in front of the platform's replicas: they stay its Triton, and the
        # proxy is its own tree (here the whole family, to tell the two apart).
        behind, proxy, proxy_user = Meter(platform=family.pid, proxy=family.pid).seconds()
        assert abs(behind - replicas) < 0.05 and proxy >= replicas + platform - 0.05
        assert own_user < proxy_user < proxy
        # Any other target: Triton's process tree, and the proxy's apart from it.
        triton, proxy, _ = Meter(triton=family.pid, proxy=family.pid).seconds()
        assert triton >= replicas + platform - 0.05 and abs(proxy - triton) < 0.05
        assert Meter(triton=family.pid).seconds()[1:] == (0.0, 0.0)
    finally:
        os.killpg(family.pid, signal.SIGKILL)  # the child too
        family.wait()
