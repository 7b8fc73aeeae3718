"""processors.triton.supervisor: exit codes pass through, signals reach the child, and the
child does not outlive a killed supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from processors.triton import supervisor
from tests.fixtures_triton import is_alive

# A child that reports its pid, exits 7 on SIGTERM, and otherwise waits.
CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print(os.getpid(), flush=True)
time.sleep(60)
"""
SUPERVISOR = f"""
import os, sys
from processors.triton.supervisor import supervise
sys.exit(supervise([sys.executable, "-c", {CHILD!r}], os.environ))
"""


@pytest.mark.parametrize(
    ("code", "expected"),
    [("raise SystemExit(5)", 5), ("import os; os.kill(os.getpid(), 9)", 137), ("pass", 0)],
)
def test_exit_code_passes_through(code: str, expected: int) -> None:
    assert supervisor.supervise([sys.executable, "-c", code], os.environ) == expected


def _start() -> tuple[subprocess.Popen[str], int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


def test_sigterm_is_forwarded_and_the_childs_code_returned() -> None:
    parent, child = _start()
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=10) == 7
    assert not is_alive(child)


def test_child_gets_sigterm_when_the_supervisor_is_killed() -> None:
    parent, child = _start()
    parent.kill()
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while is_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_alive(child)


def test_as_pid_1_it_reaps_until_its_child_ends() -> None:
    # In a subprocess: acting as init there reaps that process's children, not pytest's.
    script = """
import sys
from processors.triton import supervisor
supervisor._is_init = lambda: True
orphan_maker = "import subprocess, sys; subprocess.Popen(['true']); sys.exit(4)"
sys.exit(supervisor.supervise([sys.executable, "-c", orphan_maker], {}))
"""
    assert subprocess.run([sys.executable, "-c", script], timeout=30).returncode == 4
