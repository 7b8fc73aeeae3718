"""Replay a service's warm-up requests to its new tritonserver before the replica is ready.

``openeas processor run triton --warm-up-data-path …`` (:mod:`.run`) makes the files local
(the model repository's storage code: ``oss://`` is pulled with the same credentials), parses
them (:mod:`.warmup_files`) before tritonserver starts, and hands :meth:`WarmUp.run` to the
supervisor, which calls it in a thread once tritonserver is running. It waits for Triton's
readiness, replays each request once (Triton initialises a model lazily, on its first
inference: this is where that cost is paid), reports the phases ``warming up`` and ``warmed
up`` (with the replay's duration) to the progress sink, and only then creates the ready file
(``$OPENEAS_READY_FILE``) the runtime's readiness gate waits for. A refused request fails the
replica, as EAS fails such a deploy: a warm-up that does not work would not warm anything.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from contract.progress import WARMED_UP, WARMING_UP, Progress
from processors.base import READINESS_PATH, READY_FILE_ENV
from processors.doorbell import wait_ready
from processors.exits import say
from processors.progress import Sink
from processors.triton.warmup_files import WarmUpRequest

REQUEST_TIMEOUT = 600.0  # a first inference may build engines: minutes, not seconds
_ERROR_BYTES = 300  # of Triton's error body, in the failure message


class WarmUp:
    """Replays ``requests`` to the Triton at ``base_url``; :meth:`run` returns ``None`` when
    warmed up (or the server ended first) and the reason the replica must fail otherwise."""

    def __init__(
        self,
        requests: Sequence[WarmUpRequest],
        base_url: str,
        sink: Sink,
        ready_file: Path | None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.requests = list(requests)
        self.base_url = base_url
        self.sink = sink
        self.ready_file = ready_file
        self.clock = clock

    def run(self, child: subprocess.Popen[bytes]) -> str | None:
        if not self._wait_ready(child):
            return None  # the server ended: the supervisor reports its exit
        started = self.clock()
        total = len(self.requests)
        for done, request in enumerate(self.requests):
            self.sink(
                Progress(
                    WARMING_UP,
                    0,
                    0,
                    0,
                    0,
                    requests_done=done,
                    requests_total=total,
                    started_at=started,
                )
            )
            problem = self._replay(request)
            if problem is not None:
                return f"warm-up request {request.source} to model {request.model!r} {problem}"
        took = self.clock() - started
        self.sink(
            Progress(
                WARMED_UP,
                0,
                0,
                0,
                0,
                requests_done=total,
                requests_total=total,
                started_at=started,
                warm_up_seconds=took,
            )
        )
        say(f"warmed up: {total} requests replayed in {took:.2f} s")
        if self.ready_file is not None:
            self.ready_file.touch()
        return None

    def _wait_ready(self, child: subprocess.Popen[bytes]) -> bool:
        where = urllib.parse.urlsplit(self.base_url)
        assert where.hostname is not None and where.port is not None, self.base_url
        return wait_ready(where.hostname, where.port, READINESS_PATH, child)

    def _replay(self, request: WarmUpRequest) -> str | None:
        headers = {"Content-Type": "application/json"}
        if request.header_length is not None:
            headers = {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(request.header_length),
            }
        infer = urllib.request.Request(
            f"{self.base_url}/v2/models/{urllib.parse.quote(request.model, safe='')}/infer",
            data=request.body,
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(infer, timeout=REQUEST_TIMEOUT) as response:
                response.read()
        except urllib.error.HTTPError as e:
            said = e.read(_ERROR_BYTES).decode(errors="replace").strip()
            return f"failed: Triton answered {e.code} {said}; fix the file or remove it"
        except (urllib.error.URLError, OSError) as e:
            return f"got no answer from Triton ({e})"
        return None


def ready_file(environ: Mapping[str, str]) -> Path | None:
    """Where the runtime's readiness gate looks (``$OPENEAS_READY_FILE``), if it set one."""
    value = environ.get(READY_FILE_ENV)
    return Path(value) if value else None
