"""The values the store and the reconciler exchange about a service: what to act on
(:class:`ServiceState`), what was observed (:class:`Status`), and what the last reconcile
left in its row (:class:`StoredSummary`). Plain frozen data below the store, so neither the
store nor the reconciler imports the other for them."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.model.spec import StoredSpec


@dataclass(frozen=True)
class ServiceState:
    """The parts of a stored service the reconciler acts on."""

    name: str
    uid: str
    generation: int
    spec: StoredSpec
    stopped: bool
    deleting: bool
    restarts: int = 0  # RestartService: each one rolls every replica
    retire: tuple[str, ...] = ()  # DeleteServiceInstances: these replicas are replaced

    @property
    def wakeable(self) -> bool:
        """A request wakes it when it has no replica: its autoscaler allows zero."""
        return self.spec.to_zero and not self.stopped and not self.deleting


@dataclass(frozen=True)
class Status:
    status: str
    reason: str
    message: str
    total: int
    pending: int
    running: int


@dataclass(frozen=True)
class StoredSummary:
    """A service's row as the last reconcile left it."""

    name: str
    pending: bool  # a generation not acted on yet, or being deleted (the poll's work)
    replicas: int  # what was asked for (total_instances)
    running: int  # ready replicas as last written
    template_hash: str  # the replica template applied ("" when none could be)
