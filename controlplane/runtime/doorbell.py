"""The local runtime's end of a replica's doorbell (:mod:`processors.doorbell`).

:class:`~controlplane.runtime.local.LocalRuntime` opens one per start of a replica whose
plan rings, hands the write end to the process, and lets its readiness probe wait on
:meth:`Bell.wait` instead of sleeping: a ring (the server started, a progress phase
changed, the server is ready) ends the wait at once, so Running is noticed when Triton is
ready rather than at the next probe. The read end is watched by the event loop
(``add_reader``): no thread, no timer; a replica that never rings is probed as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from processors.doorbell import ENV_FD, SERVER_STARTED


class Bell:
    def __init__(self) -> None:
        self._read, self._write = os.pipe()  # neither inherited unless passed (PEP 446)
        os.set_blocking(self._read, False)
        self._loop = asyncio.get_running_loop()
        self._rung = asyncio.Event()
        self.server_started = False  # the replica said it launched its server
        self._loop.add_reader(self._read, self._on_readable)

    @property
    def child_fd(self) -> int:
        """The write end, for ``pass_fds``; named in the child's environment by :meth:`env`."""
        return self._write

    def env(self) -> dict[str, str]:
        return {ENV_FD: str(self._write)}

    def spawned(self) -> None:
        """The child holds its copy of the write end: ours goes, so its exit reads as EOF."""
        if self._write >= 0:
            os.close(self._write)
            self._write = -1

    async def wait(self, timeout: float) -> None:
        """Until the replica rings, or ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._rung.wait()
        self._rung.clear()

    def close(self) -> None:
        self.spawned()
        if self._read >= 0:
            self._loop.remove_reader(self._read)
            os.close(self._read)
            self._read = -1

    def _on_readable(self) -> None:
        try:
            said = os.read(self._read, 256)
        except BlockingIOError:
            return
        except OSError:
            said = b""
        if not said:  # every writer is gone (the replica ended): stop watching
            self._loop.remove_reader(self._read)
        elif SERVER_STARTED in said:
            self.server_started = True
        self._rung.set()
