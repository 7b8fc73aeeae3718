"""The runtime interface: how the reconciler makes replicas exist, whatever runs them.

Two implementations plug in here: ``local`` (replicas are processes on this machine) and
``kubernetes`` (a Deployment + Service per service). The reconciler hands a runtime the
desired replica set as pure data, asks what it observes, and is woken by ``notify`` when
something changed underneath (a replica became ready, crashed, was deleted).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from contract.progress import Progress

ReplicaState = Literal["Pending", "Running", "CrashLoopBackOff", "Failed", "Terminating"]
# The reason of a local replica whose process has not launched its server yet (it rings its
# doorbell then, :mod:`processors.doorbell`); "Starting" after, as a pod's while it loads.
PROCESS_STARTING = "ProcessStarting"
# Readiness probes failed in a row before a ready replica counts as not ready (Kubernetes's
# failureThreshold, which the pods get too): a busy replica's one late answer is no verdict.
READY_PROBE_FAILURES = 3


def probed_state(state: ReplicaState, ready: bool, misses: int) -> ReplicaState:
    """A live replica's state after a readiness probe; ``misses``: probes failed in a row,
    this one included. Running stays Running until :data:`READY_PROBE_FAILURES` of them."""
    if ready or (state == "Running" and misses < READY_PROBE_FAILURES):
        return "Running"
    return "Pending"


class RuntimeError_(Exception):
    """Base of runtime failures; subclasses say whether retrying can help."""


class TemporaryRuntimeError(RuntimeError_):
    """Retry later (API server unreachable, conflict, timeout)."""


class PermanentRuntimeError(RuntimeError_):
    """Retrying the same generation cannot help (invalid object, unknown resource group):
    the service becomes ``Failed`` with this message until its spec changes."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Resources:
    cpu: int
    gpu: int
    memory_mb: int
    resource_group: str | None = None


@dataclass(frozen=True)
class Mount:
    """A ``storage[]`` entry as a runtime places it at ``path``: ``oss`` pulled there before
    the replica starts (``source`` the oss:// URI), ``nfs`` (``server``, ``source`` its
    export path) or ``memory`` (a tmpfs of ``size_gb``, e.g. /dev/shm)."""

    path: str
    kind: Literal["oss", "nfs", "memory"]
    source: str = ""
    server: str = ""
    read_only: bool = False
    size_gb: int | None = None


@dataclass(frozen=True)
class Image:
    """A ``containers[]`` entry: the image, its command as words (for a Triton container
    the normalised tritonserver flags, platform flags left to the runtime), its port and
    env, and its checks as probe fields keyed by ``startup``, ``liveness``, ``readiness``
    (``{"http_get": {...}, "period_seconds": 5, ...}`` as EAS writes them)."""

    image: str
    argv: tuple[str, ...]
    port: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    checks: tuple[tuple[str, dict[str, object]], ...] = ()
    triton: bool = False


@dataclass(frozen=True)
class DesiredReplicaSet:
    """What should run for one service. ``template_hash`` covers everything that needs new
    replicas when it changes (processor, params, resources), but not the replica count."""

    service: str  # EAS name
    object_name: str  # Kubernetes-safe name (controlplane.model.spec.k8s_name)
    uid: str
    generation: int
    replicas: int
    processor: str
    params: tuple[str, ...]
    oss_endpoint: str | None
    resources: Resources
    template_hash: str
    warm_up: str | None = None  # the spec's warm_up_data_path
    image: Image | None = None  # the spec's containers[0] (None: the processor form)
    sidecars: tuple[Image, ...] = ()  # the spec's containers[1:]
    mounts: tuple[Mount, ...] = ()  # the spec's storage[]
    instance_types: tuple[str, ...] = ()  # cloud.computing's EAS instance types
    # metadata.rolling_strategy as (max_surge, max_unavailable): counts or "25%".
    rolling: tuple[int | str, int | str] | None = None
    termination_grace_seconds: int | None = None  # metadata.eas.termination_grace_period
    enable_sigterm: bool | None = None  # metadata.rpc.enable_sigterm (None: as true)
    # Replicas (by name) to replace as an update replaces old ones (DeleteServiceInstances):
    # a name never comes back, so one that is gone stays gone.
    retire: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ReplicaStatus:
    name: str
    template_hash: str
    state: ReplicaState  # "Running" means ready to serve
    endpoint: str | None = None  # base URL the gateway forwards to, when ready
    restarts: int = 0
    reason: str = ""
    message: str = ""  # for a human: last log lines, scheduler message, ...
    permanent: bool = False  # failed in a way that restarting cannot fix (bad model repo)
    metrics: str | None = None  # base URL of the replica's metrics port, when ready
    progress: Progress | None = None  # how far its model pull is, while it has one
    grpc_endpoint: str | None = None  # its gRPC port as http://host:port, when ready

    def as_dict(self, *, current: bool) -> dict[str, object]:
        """As stored for describe and the route table; ``current``: of the desired template."""
        return {
            "name": self.name,
            "state": self.state,
            "endpoint": self.endpoint,
            "grpc_endpoint": self.grpc_endpoint,
            "restarts": self.restarts,
            "reason": self.reason,
            "message": self.message,
            "current": current,
            "progress": self.progress.as_dict() if self.progress else None,
        }


@dataclass(frozen=True)
class ReplicaSummary:
    """A service's replicas in one line, for the bulk resync: how many are wanted (not
    terminating), how many are ready, and the templates they run."""

    replicas: int
    ready: int
    templates: frozenset[str]


@dataclass
class Observation:
    replicas: list[ReplicaStatus] = field(default_factory=list)


Notify = Callable[[str], None]  # called with a service name when its replicas changed


class LogSource(Protocol):
    async def logs(
        self, service: str, replica: int | None, tail: int, *, previous: bool = False
    ) -> str:
        """The last ``tail`` lines of a replica's output (``None``: the newest replica);
        ``previous``: of its run before the last restart. FileNotFoundError when there is
        no such replica (or run)."""

    def follow(self, service: str, replica: int | None, tail: int) -> AsyncIterator[str]:
        """The last ``tail`` lines, then the output as it comes, until the caller stops
        iterating; FileNotFoundError (on the first step) when there is no such replica."""


class Runtime(Protocol):
    async def claim(self, installation: str) -> str | None:
        """Act for the installation whose database has id ``installation``; why not, when
        the place replicas run belongs to another one. Called before any other method."""

    async def warn(self, reason: str, message: str) -> None:
        """Tell the operator, where they look for this runtime's events, of something no
        service owns."""

    async def apply(self, desired: DesiredReplicaSet) -> None:
        """Move the replicas one step toward ``desired``; idempotent, never blocks for
        long (readiness arrives later through ``notify``)."""

    async def observe(self, service: str) -> Observation:
        """The replicas as they are now."""

    async def delete(self, service: str) -> bool:
        """Remove everything made for ``service``; True once nothing is left."""

    async def services(self) -> set[str]:
        """Names of the services this runtime runs replicas for (to find orphans)."""

    async def summary(self) -> dict[str, ReplicaSummary]:
        """Every service this runtime runs replicas for, in one listing (bulk resync)."""

    async def logs(self, service: str, replica: int | None, tail: int) -> str:
        """The last ``tail`` lines of a replica's output (``None``: the newest replica)."""

    async def close(self) -> None:
        """Stop watching. The local runtime also stops its replicas (no orphans)."""


@runtime_checkable
class CpuSource(Protocol):
    """A runtime that can say how much CPU a service's replicas use (the autoscaler's
    ``cpu`` metric); both runtimes are, a test double need not be."""

    async def cpu_cores(self, service: str) -> list[float]:
        """CPU in use now, in cores, by each ready replica that has a measurement."""
