"""A second process for a pull's many small files.

A small file's GET costs about a millisecond of CPU in ``oss2``/``requests``, nearly all of
it under the interpreter lock, so one process fetches at most ~1000 small files a second
however many threads it runs: on a loopback, or an endpoint a millisecond away, that CPU is
the pull's time. :func:`processors.storage.pull.pull` hands half of them (when
:func:`wanted`) to :func:`start`: a forked copy of itself with connections of its own,
which reports each file on a pipe as it is written, and its failure as the exception.

Forking is safe only while no other thread runs (one could hold a lock the copy would
inherit held), which is how ``openeas processor pull`` calls it; otherwise, and on one
CPU, the pull fetches everything itself.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable, Iterator

from processors.storage.errors import TemporaryStorageError

MANY = 128  # small files worth a process: it costs a fork and a connection
_POLL = 0.2  # seconds between looks at the pull's stop flag while reading the pipe

Report = Callable[[str], None]  # the helper's side: one line about one file


def wanted(files: int, workers: int, cpus: int, threads: int) -> bool:
    """Whether ``files`` small files are fetched in two processes (each with half the
    ``workers``), with ``cpus`` CPUs to run on and ``threads`` threads in this process."""
    return files >= MANY and workers > 1 and cpus > 1 and threads == 1


def cpus() -> int:
    """CPUs this process may run on (all of them where the platform cannot say)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


class Helper:
    """The parent's side: :meth:`lines` yields what the helper reported, then raises what
    it failed with; set ``stop`` to end it early, :meth:`close` it in any case."""

    def __init__(self, pid: int, pipe: int) -> None:
        self._pid = pid
        self._pipe = pipe
        self._code: int | None = None  # once collected

    def close(self) -> None:
        """End the helper if it still runs (the pull failed before reading it out)."""
        if self._code is None:
            self._collect(kill=True)

    def lines(self, stop: threading.Event) -> Iterator[str]:
        buffer, ended = b"", False
        try:
            while not stop.is_set():
                if not select.select([self._pipe], [], [], _POLL)[0]:
                    continue
                chunk = os.read(self._pipe, 1 << 16)
                if not chunk:
                    ended = True
                    break
                *complete, buffer = (buffer + chunk).split(b"\n")
                for line in complete:
                    kind, _, rest = line.partition(b" ")
                    if kind == b"error":
                        raise _unpickled(bytes.fromhex(rest.decode()))
                    yield rest.decode()
        finally:
            code = self._collect(kill=not ended)
        if ended and code != 0:
            raise TemporaryStorageError(
                f"the process fetching half the small files ended with {code}: pull again"
            )

    def _collect(self, *, kill: bool) -> int:
        """Wait for the helper to exit (ending it first if ``kill``): its exit code."""
        os.close(self._pipe)
        if kill:
            os.kill(self._pid, signal.SIGKILL)  # a zombie can still be signalled
        self._code = os.waitstatus_to_exitcode(os.waitpid(self._pid, 0)[1])
        return self._code


def start(work: Callable[[Report], None]) -> Helper:
    """Fork; the child runs ``work`` with a function that reports one line per file (from
    any of its threads), sends the exception it raised if any, and exits without running
    the parent's exit hooks or flushing its buffers."""
    read, write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write)
        return Helper(pid, read)
    code = 1
    try:
        os.close(read)
        with os.fdopen(write, "wb", buffering=0) as out:

            def report(line: str) -> None:
                out.write(b"file " + line.encode() + b"\n")  # one write: atomic on a pipe

            try:
                work(report)
            except BaseException as e:  # the parent raises it
                out.write(b"error " + _pickled(e).hex().encode() + b"\n")
            code = 0
    finally:
        os._exit(code)


def _pickled(e: BaseException) -> bytes:
    import pickle  # here, where a helper failed: a pull's process starts without it (ms)

    try:
        return pickle.dumps(e)
    except Exception:  # an exception holding something unpicklable: its words, at least
        return pickle.dumps(RuntimeError(f"{type(e).__name__}: {e}"))


def _unpickled(data: bytes) -> BaseException:
    import pickle  # as in _pickled

    error: BaseException = pickle.loads(data)
    return error
