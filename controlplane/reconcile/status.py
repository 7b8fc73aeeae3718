"""Service status from what the runtime observes: a pure function, tested table-style.

``Waiting`` with counts while replicas come up, ``Running`` once the desired number of
current replicas is ready and no old one is left, ``Failed`` with an actionable reason when
replicas cannot come up, ``Stopped``/``Stopping``/``Deleting`` for those requests, and
``ScaledToZero`` for a service its autoscaler took to zero (a request wakes it).
"""

from __future__ import annotations

from controlplane.model.states import Status
from controlplane.runtime.base import DesiredReplicaSet, Observation, ReplicaStatus

CRASHLOOP_FAILED_AFTER = 2  # restarts with nothing ready before the service shows Failed
SCALED_TO_ZERO = "ScaledToZero"
SCALED_TO_ZERO_MESSAGE = "scaled to zero, wakes on request"


def compute(
    desired: DesiredReplicaSet,
    seen: Observation,
    *,
    deleting: bool,
    previous: str,
    wakeable: bool = False,
) -> Status:
    """``wakeable``: at zero by its autoscaler (min 0, not stopped), not by a stop."""
    current = [r for r in seen.replicas if r.template_hash == desired.template_hash]
    ready = [r for r in current if r.state == "Running"]
    total = desired.replicas
    running = min(len(ready), total)
    counts = {"total": total, "pending": total - running, "running": running}
    if deleting:
        return Status("Deleting", "", "", **counts)
    if total == 0:
        if wakeable:
            return Status(SCALED_TO_ZERO, SCALED_TO_ZERO, SCALED_TO_ZERO_MESSAGE, **counts)
        if seen.replicas:
            return Status("Stopping", "", "", **counts)
        return Status("Stopped", "", "", **counts)
    old = [r for r in seen.replicas if r.template_hash != desired.template_hash]
    if len(ready) >= total and not old:
        return Status("Running", "", "", **counts)
    broken = _broken(current)
    if broken is not None and not ready:
        return Status("Failed", broken.reason, broken.message, **counts)
    waiting = _waiting_reason(current)
    state = "Updating" if previous in ("Running", "Updating") and (ready or old) else "Waiting"
    return Status(
        state, waiting.reason if waiting else "", waiting.message if waiting else "", **counts
    )


def _broken(replicas: list[ReplicaStatus]) -> ReplicaStatus | None:
    """The replica whose failure explains the service, if any."""
    for r in replicas:
        if r.permanent or r.state == "Failed":
            return r
    for r in replicas:
        if r.state == "CrashLoopBackOff" and r.restarts >= CRASHLOOP_FAILED_AFTER:
            return r
    return None


def _waiting_reason(replicas: list[ReplicaStatus]) -> ReplicaStatus | None:
    return next((r for r in replicas if r.state != "Running" and r.reason), None)
