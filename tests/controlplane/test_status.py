"""Service status from observed replicas (table tests, no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.model.spec import StoredSpec
from controlplane.model.states import ServiceState
from controlplane.reconcile.desired import desired
from controlplane.reconcile.status import compute
from controlplane.runtime.base import Observation, ReplicaStatus

SPEC = StoredSpec.model_validate(
    {"name": "s", "processor": "triton", "processor_params": [], "metadata": {"instance": 2}}
)
WANT = desired(ServiceState("s", "u", 1, SPEC, stopped=False, deleting=False))
H = WANT.template_hash


def rep(state: str, template: str = H, **kw: Any) -> ReplicaStatus:
    return ReplicaStatus(name="s-x", template_hash=template, state=state, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("replicas", "previous", "expected"),
    [
        ([], "Creating", ("Waiting", 2, 2, 0)),
        ([rep("Pending"), rep("Running")], "Creating", ("Waiting", 2, 1, 1)),
        ([rep("Running"), rep("Running")], "Waiting", ("Running", 2, 0, 2)),
        ([rep("Running"), rep("Running"), rep("Running")], "Running", ("Running", 2, 0, 2)),
        # rolling update: old replica still serving
        ([rep("Running", "old"), rep("Running"), rep("Pending")], "Running", ("Updating", 2, 1, 1)),
        (
            [rep("Running", "old"), rep("Running"), rep("Running")],
            "Updating",
            ("Updating", 2, 0, 2),
        ),
        ([rep("CrashLoopBackOff", restarts=1)], "Creating", ("Waiting", 2, 2, 0)),
        (
            [rep("CrashLoopBackOff", restarts=2, reason="CrashLoopBackOff")],
            "Waiting",
            ("Failed", 2, 2, 0),
        ),
        ([rep("Failed", permanent=True, reason="ModelPullFailed")], "Waiting", ("Failed", 2, 2, 0)),
        # a broken replica beside a ready one: still serving, so not Failed
        ([rep("Failed", permanent=True), rep("Running")], "Running", ("Updating", 2, 1, 1)),
    ],
)
def test_compute(
    replicas: list[ReplicaStatus], previous: str, expected: tuple[str, int, int, int]
) -> None:
    s = compute(WANT, Observation(replicas), deleting=False, previous=previous)
    assert (s.status, s.total, s.pending, s.running) == expected


def test_failure_carries_reason_and_message() -> None:
    broken = rep("Failed", permanent=True, reason="ModelPullFailed", message="oss://b is empty")
    s = compute(WANT, Observation([broken]), deleting=False, previous="Waiting")
    assert (s.reason, s.message) == ("ModelPullFailed", "oss://b is empty")


def test_waiting_names_the_reason_of_a_pending_replica() -> None:
    pending = rep(
        "Pending", reason="Unschedulable", message="0/3 nodes: Insufficient nvidia.com/gpu"
    )
    s = compute(WANT, Observation([pending]), deleting=False, previous="Creating")
    assert (s.status, s.reason) == ("Waiting", "Unschedulable")
    assert "nvidia.com/gpu" in s.message


def test_stopped_stopping_deleting() -> None:
    stopped = desired(ServiceState("s", "u", 1, SPEC, stopped=True, deleting=False))
    assert (
        compute(stopped, Observation([rep("Running")]), deleting=False, previous="Running").status
        == "Stopping"
    )
    assert compute(stopped, Observation([]), deleting=False, previous="Stopping").status == (
        "Stopped"
    )
    assert compute(WANT, Observation([]), deleting=True, previous="Running").status == "Deleting"
