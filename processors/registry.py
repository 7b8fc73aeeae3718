"""Processor registry: what a replica runs, by processor name.

The control plane calls :func:`get` to validate ``processor_params`` at create/update time
and to compute each replica's :class:`ReplicaPlan`; runtimes (local, kubernetes) turn a plan
into a process or a container. This package imports neither server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


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
class ReplicaPlan:
    """Everything a runtime needs to start one replica of a service."""

    command: list[str]  # argv of the replica process (local runtime)
    env: dict[str, str] = field(default_factory=dict)
    http_port: int = 8000
    readiness_path: str = "/v2/health/ready"
    liveness_path: str = "/v2/health/live"
    model_uri: str | None = None  # what the replica pulls before starting (oss://, file://)
    # The same command as arguments of the ``openeas`` entry point, for a container whose
    # image provides it (kubernetes runtime); empty when the command is not an openeas one.
    openeas_args: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Processor:
    name: str
    # Returns the normalised params (``--flag=value`` form) or raises ProcessorError.
    validate: Callable[[Sequence[str]], list[str]]
    # (normalised params, ports, oss_endpoint) -> plan
    plan: Callable[[Sequence[str], Ports, str | None], ReplicaPlan]
    # Inside the replica: (params, ports, model cache dir or None) -> exit code.
    # ``openeas processor run <name>`` calls it; None for processors without a runner.
    run: Callable[[Sequence[str], Ports, Path | None], int] | None = None


_REGISTRY: dict[str, Processor] = {}


def register(processor: Processor) -> None:
    _REGISTRY[processor.name] = processor


def names() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def get(name: str) -> Processor:
    """The processor called ``name``; ProcessorError naming the known ones otherwise."""
    _load_builtin()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ProcessorError(
            f"unknown processor {name!r}", field="processor", fix=f"use one of: {known}"
        ) from None


def _load_builtin() -> None:
    if not _REGISTRY:
        from processors import triton

        register(triton.PROCESSOR)
