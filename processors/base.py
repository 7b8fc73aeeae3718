"""What every processor provides and every runtime consumes: the bottom of ``processors``.

The registry, the runtimes (local, kubernetes) and the processors themselves import this
module, never each other's internals, so no runtime knows Triton and there is no cycle.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

_PR_SET_PDEATHSIG = 1

# A file the runtime names for a replica with warm-up requests: the replica creates it once
# they are replayed, and the runtime's readiness gate waits for it (local: its probe;
# Kubernetes: the startup probe), so no user request reaches an unwarmed replica.
READY_FILE_ENV = "OPENEAS_READY_FILE"
READINESS_PATH = "/v2/health/ready"  # Triton's: 200 once every model is loaded


class ProcessorError(ValueError):
    """Bad processor input; ``field`` names the spec field, ``fix`` says what to type."""

    def __init__(self, message: str, *, field: str = "processor_params", fix: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.fix = fix

    def one_line(self) -> str:
        """``<field>: <message>; <fix>`` for a terminal or a log line."""
        return f"{self.field}: {self}" + (f"; {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class Ports:
    """Ports the platform assigns to a replica (never the tenant)."""

    http: int
    grpc: int
    metrics: int
    # Where the replica listens: loopback for the local runtime, 0.0.0.0 in a pod.
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class Pull:
    """A model repository the runtime downloads before the replica starts (the kubernetes
    runtime's init container): ``uri`` into the folder ``into`` that the plan serves from."""

    uri: str
    into: str


@dataclass(frozen=True)
class ReplicaPlan:
    """Everything a runtime needs to start one replica of a service."""

    command: list[str]  # argv of the replica process (local runtime)
    env: dict[str, str] = field(default_factory=dict)
    http_port: int = 8000
    readiness_path: str = READINESS_PATH
    liveness_path: str = "/v2/health/live"
    # Set when the plan serves a pulled copy (``model_dir`` given and the repository remote).
    pull: Pull | None = None
    # The same command as arguments of the ``openeas`` entry point, for a container whose
    # image provides it (kubernetes runtime); empty when the command is not an openeas one.
    openeas_args: list[str] = field(default_factory=list)
    # Warm-up requests to replay before ready: the runtime gates readiness on the ready file
    # (READY_FILE_ENV). ``warm_up_pull``: remote request files the runtime pulls first.
    warms_up: bool = False
    warm_up_pull: Pull | None = None
    # The process rings the local runtime's doorbell (:mod:`processors.doorbell`) when its
    # server starts and is ready, so the runtime need not probe it often meanwhile.
    rings: bool = False


class Plan(Protocol):
    """(normalised params, ports, oss_endpoint, model_dir) -> plan. ``model_dir``: a local
    folder the runtime pulls a remote repository into before the replica starts (None: the
    replica makes the repository local itself). ``warm_up``: the spec's
    ``warm_up_data_path``; with ``warm_up_dir`` a remote one is pulled there by the runtime."""

    def __call__(
        self,
        params: Sequence[str],
        ports: Ports,
        oss_endpoint: str | None,
        model_dir: str | None,
        /,
        *,
        warm_up: str | None = None,
        warm_up_dir: str | None = None,
    ) -> ReplicaPlan: ...


@dataclass(frozen=True)
class Processor:
    name: str
    # Returns the normalised params (``--flag=value`` form) or raises ProcessorError.
    validate: Callable[[Sequence[str]], list[str]]
    plan: Plan
    # Inside the replica: (params, ports, model cache dir or None, warm-up data path or None)
    # -> exit code. ``openeas processor run <name>`` calls it; None for processors without
    # a runner.
    run: Callable[[Sequence[str], Ports, Path | None, str | None], int] | None = None
    # For an image that runs the server itself (EAS's ``containers[]`` form): (normalised
    # params, ports, admin key, shm prefix) -> the platform's flags after the user's.
    image_args: Callable[[Sequence[str], Ports, str, str], list[str]] | None = None


def die_with(parent: int, own_group: bool = False) -> Callable[[], None]:
    """preexec_fn: SIGTERM the child when ``parent`` dies, even by SIGKILL (Linux
    ``PR_SET_PDEATHSIG``); used for replicas (local runtime) and their servers.
    ``own_group``: the child leads a process group of its own, in the parent's session
    (``Popen``'s ``process_group=0``, which uvloop's subprocesses do not take)."""

    def arrange() -> None:
        if own_group:
            os.setpgid(0, 0)
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
            if os.getppid() != parent:  # the parent died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)

    return arrange
