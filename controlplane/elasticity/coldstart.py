"""Where a cold start's time went, from a wake-up to the first ready replica: pure, tested
as a table.

The leading autoscaler (:mod:`controlplane.elasticity.scaling_loop`) opens a
:class:`ColdStart` when it takes a service from zero (a gateway's wake-up or load), feeds it
every observation the reconciler makes of the replicas, and writes the breakdown as a
``ColdStart`` event once a replica is ready. Phases are read from what a replica says of itself:

- *decision*: the wake-up asked → the new replica count written;
- *process/pod start*: written → the replica first seen doing its own work (local: its
  process launched tritonserver, as its doorbell says; on Kubernetes: scheduling, image,
  ``ContainerCreating``);
- *model pull*: its pull progress (or the pull init container, ``PodInitializing``);
- *Triton load*: pulled and not ready yet (the processor and Triton starting, models loading);
- *warm-up*: the progress phases ``warming up``/``warmed up`` (``warm_up_data_path``
  replayed), 0 without them.

Observations come when the runtime notifies (a probe flips, a progress phase changes, a
local replica rings), so each boundary is as sharp as the runtime sees it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from contract.progress import WARMED_UP, WARMING_UP
from controlplane.runtime.base import PROCESS_STARTING, ReplicaStatus

PHASES = ("decision", "start", "pull", "load", "warm-up")
LABELS = {
    "decision": "decision",
    "start": "process/pod start",
    "pull": "model pull",
    "load": "Triton load",
    "warm-up": "warm-up",
}
# Kubernetes reasons of a pod that is not running its own code yet; the local runtime's of
# a process that has not launched its server yet.
STARTING_REASONS = frozenset(
    {"ContainerCreating", "Unschedulable", "FailedCreate", PROCESS_STARTING}
)
PULLING_REASONS = frozenset({"PodInitializing"})  # the pull init container runs


def phase_of(replica: ReplicaStatus) -> str:
    """What a replica is doing: one of ``start``, ``pull``, ``load``, ``warm-up``, ``ready``."""
    if replica.state == "Running":
        return "ready"
    if replica.progress is not None:
        phase = replica.progress.phase
        if phase == "pulling":
            return "pull"
        return "warm-up" if phase in (WARMING_UP, WARMED_UP) else "load"
    if replica.reason in PULLING_REASONS:
        return "pull"
    return "start" if replica.reason in STARTING_REASONS else "load"


def breakdown(
    requested: float, decided: float, marks: Iterable[tuple[str, float]]
) -> dict[str, float]:
    """Seconds per phase, from when the wake-up was asked, when the count was written, and
    the phases one replica went through (each with when it was first seen, ``ready`` last)."""
    spent = dict.fromkeys(PHASES, 0.0)
    spent["decision"] = max(0.0, decided - requested)
    marks = list(marks)
    # A replica that is up but not pulling yet (a local process before its first progress
    # report) is still starting when a pull follows.
    pulls = [i for i, (seen, _) in enumerate(marks) if seen == "pull"]
    phase, since = "start", decided
    for i, (seen, at) in enumerate(marks):
        spent[phase] += max(0.0, at - since)
        phase, since = seen, max(since, at)
        if seen == "load" and pulls and i < pulls[-1]:
            phase = "start"
        if seen == "ready":
            break
    return spent


def message(spent: dict[str, float], trigger: str) -> str:
    """``cold start 9.41 s (woken by a request): decision 0.01 s, process/pod start …``."""
    total = sum(spent.values())
    parts = ", ".join(f"{LABELS[p]} {spent[p]:.2f} s" for p in PHASES)
    return f"cold start {total:.2f} s ({trigger}): {parts}"


@dataclass
class ColdStart:
    """One service's way from zero to its first ready replica, as observed."""

    requested: float  # when the wake-up was asked (or the load seen)
    decided: float  # when the replica count was written
    trigger: str
    marks: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # per replica

    def observe(self, replicas: Iterable[ReplicaStatus], now: float) -> str | None:
        """Note each replica's phase; the event's message once one of them is ready."""
        for replica in replicas:
            phase = phase_of(replica)
            seen = self.marks.setdefault(replica.name, [])
            if not seen or seen[-1][0] != phase:
                seen.append((phase, now))
            if phase == "ready":
                return message(breakdown(self.requested, self.decided, seen), self.trigger)
        return None
