"""Run one child process the way a container's PID 1 should.

``openeas processor run triton`` calls :func:`supervise` to start tritonserver after the
model pull. The child stays in our process group (a runtime that kills the group reaches it;
Triton ignores a second SIGINT from a terminal's Ctrl-C). SIGTERM, SIGINT, SIGHUP and
SIGQUIT sent to us alone (``docker stop``, the kubelet, ``Popen.terminate``) are forwarded.
If we die without forwarding (SIGKILL), the kernel sends the child SIGTERM (Linux
``PR_SET_PDEATHSIG``). As PID 1 we also reap orphans the child leaves behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from processors.base import die_with

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def exit_code(returncode: int) -> int:
    """A shell's spelling of a child's end: its code, or 128+N when signal N killed it."""
    return returncode if returncode >= 0 else 128 - returncode


Beside = Callable[[subprocess.Popen[bytes]], None]


def supervise(argv: Sequence[str], env: Mapping[str, str], beside: Beside | None = None) -> int:
    """Start ``argv``, forward signals to it, wait, and return :func:`exit_code` of it.
    ``beside`` runs in a daemon thread once the child is up (the warm-up replay)."""
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []  # signals that arrived before the child existed

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            pending.append(signum)
        elif child.returncode is None:
            # os.kill, not send_signal: that polls, and could reap the child under _wait.
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        child = subprocess.Popen(list(argv), env=dict(env), preexec_fn=die_with(os.getpid()))
        for signum in pending:
            os.kill(child.pid, signum)
        if beside is not None:
            threading.Thread(target=beside, args=(child,), name="beside", daemon=True).start()
        return exit_code(_wait(child))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _is_init() -> bool:
    return os.getpid() == 1


def _wait(child: subprocess.Popen[bytes]) -> int:
    if not _is_init():
        return child.wait()
    while True:  # as PID 1, every orphan in the container is ours to reap
        pid, status = os.waitpid(-1, 0)
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return child.returncode
