"""processors.triton.supervisor: exit codes pass through, signals reach the child, and the
child does not outlive a killed supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from processors.triton import supervisor
from testing.waiting import wait_until
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
    wait_until(lambda: not is_alive(child), 20, what="the child ends")


# The supervised child runs a helper that starts a short-lived grandchild and exits at once,
# so the grandchild is orphaned; it dies while the child still runs (1 s).
ORPHANING_CHILD = """
import subprocess, sys, time
subprocess.run([sys.executable, "-c", "import subprocess; subprocess.Popen(['sleep', '0.2'])"])
time.sleep(1)
sys.exit(4)
"""


@pytest.mark.parametrize("as_init", [True, False], ids=["pid1", "not-pid1"])
def test_as_pid_1_it_reaps_orphans_until_its_child_ends(as_init: bool) -> None:
    """In a subprocess made a child subreaper (orphans below it are re-parented to it, as to
    PID 1 in a container): as init the supervisor reaps the orphan; the control run shows
    that otherwise the orphan stays behind as a zombie."""
    script = f"""
import ctypes, os, sys
from processors.triton import supervisor
ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
supervisor._is_init = lambda: {as_init}
code = supervisor.supervise([sys.executable, "-c", {ORPHANING_CHILD!r}], {{}})
try:
    left = os.waitpid(-1, os.WNOHANG)[0]  # a zombie left for us, or 0 if one still runs
except ChildProcessError:
    left = None  # no child at all: every orphan was reaped
print("left" if left is not None else "none", flush=True)
sys.exit(code)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 4, done.stderr
    assert done.stdout.split() == (["none"] if as_init else ["left"])
