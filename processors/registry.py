"""Processor registry: what a replica runs, by processor name.

The control plane calls :func:`get` to validate ``processor_params`` at create/update time
and to compute each replica's :class:`ReplicaPlan`; runtimes (local, kubernetes) turn a plan
into a process or a container. This package imports neither server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


class ProcessorError(ValueError):
    """Bad processor input; ``field`` names the spec field, ``fix`` says what to type."""

    def __init__(self, message: str, *, field: str = "processor_params", fix: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.fix = fix


@dataclass(frozen=True)
class Ports:
    """Ports the platform assigns to a replica (never the tenant)."""

    http: int
    grpc: int
    metrics: int


@dataclass(frozen=True)
class ReplicaPlan:
    """Everything a runtime needs to start one replica of a service."""

    command: list[str]  # argv of the replica process/container
    env: dict[str, str] = field(default_factory=dict)
    http_port: int = 8000
    readiness_path: str = "/v2/health/ready"
    liveness_path: str = "/v2/health/live"
    model_uri: str | None = None  # what the replica pulls before starting (oss://, file://)


@dataclass(frozen=True)
class Processor:
    name: str
    # Returns the normalised params (``--flag=value`` form) or raises ProcessorError.
    validate: Callable[[Sequence[str]], list[str]]
    # (normalised params, ports, oss_endpoint) -> plan
    plan: Callable[[Sequence[str], Ports, str | None], ReplicaPlan]


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
