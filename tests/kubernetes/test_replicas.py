"""Pod and Deployment status → replicas, table-style (pure; the kubelet's and scheduler's
status shapes come from the stand-in's builders)."""

from __future__ import annotations

from typing import Any

import pytest

from contract.progress import Progress
from controlplane.runtime.kubernetes.replicas import (
    MAX_MESSAGE,
    observation,
    pull_phase,
    replica_status,
)
from testing import k8s_server as ks


def pod(
    name: str = "svc-abc-00000", status: dict[str, Any] | None = None, **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"openeas.io/template-hash": "t1"}, **meta},
        "spec": {
            "initContainers": [{"name": "model-pull"}],
            "containers": [{"name": "processor", "resources": {"limits": {"memory": "2000Mi"}}}],
        },
        "status": status if status is not None else {"phase": "Pending"},
    }


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "processor", "state": {"waiting": {"reason": reason, "message": message}}}
        ],
    }


@pytest.mark.parametrize(
    ("status", "state", "reason", "permanent"),
    [
        ({"phase": "Pending"}, "Pending", "Starting", False),
        (waiting("ContainerCreating"), "Pending", "ContainerCreating", False),
        (ks.status_starting(), "Pending", "Starting", False),
        (ks.status_ready(), "Running", "", False),
        (ks.status_unschedulable(), "Pending", "Unschedulable", False),
        (ks.status_image_pull_backoff(), "CrashLoopBackOff", "ImagePullBackOff", False),
        (waiting("ErrImagePull"), "CrashLoopBackOff", "ErrImagePull", False),
        (waiting("InvalidImageName"), "Failed", "InvalidImageName", True),
        (waiting("CreateContainerConfigError", 'secret "openeas-oss" not found'),
         "CrashLoopBackOff", "CreateContainerConfigError", False),
        (ks.status_init_failed(exit_code=3), "Failed", "ModelPullFailed", True),
        (ks.status_init_failed(exit_code=75), "CrashLoopBackOff", "ModelPullFailed", False),
        (ks.status_crash_loop(exit_code=127), "Failed", "CrashLoopBackOff", True),
        (ks.status_oom_killed(), "CrashLoopBackOff", "OOMKilled", False),
    ],
)  # fmt: skip
def test_pod_states(status: dict[str, Any], state: str, reason: str, permanent: bool) -> None:
    replica = replica_status(pod(status=status))
    assert (replica.state, replica.reason, replica.permanent) == (state, reason, permanent)
    assert replica.template_hash == "t1"


def test_a_failed_warm_up_fails_the_replica_with_its_message() -> None:
    said = "openeas: warm-up request m/1.json to model 'm' failed: Triton answered 400 ..."
    replica = replica_status(pod(status=ks.status_crash_loop(exit_code=5, message=said)))
    assert (replica.state, replica.permanent) == ("Failed", True)
    assert replica.message.startswith(said)
    assert "exited with code 5" in replica.message


def test_a_ready_replica_has_its_pod_endpoint() -> None:
    status = ks.status_ready()
    status["podIP"] = "10.244.1.7"
    replica = replica_status(pod(status=status))
    assert replica.endpoint == "http://10.244.1.7:8000"
    assert replica.grpc_endpoint == "http://10.244.1.7:8001"  # the pod's gRPC port


def test_messages_say_what_happened() -> None:
    oom = replica_status(pod(status=ks.status_oom_killed(restarts=4)))
    assert oom.restarts == 4
    assert "ran out of memory (limit 2000Mi); raise metadata.memory" in oom.message
    assert "exited with code 137" in oom.message
    pull = replica_status(
        pod(status=ks.status_init_failed(message="openeas: model pull failed: x"))
    )
    assert pull.message.startswith("openeas: model pull failed: x")
    secret = replica_status(
        pod(status=waiting("CreateContainerConfigError", 'secret "s" not found'))
    )
    assert secret.message == 'secret "s" not found'
    long = ks.status_crash_loop(message="x" * (MAX_MESSAGE * 2))
    assert len(replica_status(pod(status=long)).message) <= MAX_MESSAGE + 1


def test_a_deleted_pod_is_terminating() -> None:
    replica = replica_status(
        pod(status=ks.status_ready(), deletionTimestamp="2025-01-01T00:00:00Z")
    )
    assert replica.state == "Terminating"


def test_observation_orders_pods_and_skips_finished_ones() -> None:
    evicted = {"phase": "Failed", "reason": "Evicted", "message": "node low on memory"}
    seen = observation([], [pod("b"), pod("a"), pod("c", status=evicted)])
    assert [r.name for r in seen.replicas] == ["a", "b"]


def test_a_deployment_that_cannot_create_pods_shows_why() -> None:
    deployment = {
        "metadata": {"name": "svc"},
        "spec": {
            "replicas": 2,
            "template": {"metadata": {"labels": {"openeas.io/template-hash": "t1"}}},
        },
        "status": {
            "conditions": [
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "reason": "FailedCreate",
                    "message": 'pods "svc-x" is forbidden: exceeded quota: gpu',
                }
            ]
        },
    }
    seen = observation([deployment], [pod("svc-1")])
    assert [(r.state, r.reason, r.template_hash) for r in seen.replicas][-1] == (
        "Pending",
        "FailedCreate",
        "t1",
    )
    assert "exceeded quota" in seen.replicas[-1].message
    assert len(observation([deployment], [pod("svc-1"), pod("svc-2")]).replicas) == 2


PULLED = Progress("pulled", 4, 4, 4000, 4000, rate=100.0, eta_s=0.0)


@pytest.mark.parametrize(
    ("status", "phase"),
    [
        ({"phase": "Pending"}, None),  # not scheduled, nothing started
        (ks.status_unschedulable(), None),
        (ks.status_pulling(), "pulling"),
        (ks.status_starting(), "loading"),  # pulled, the server not ready yet
        (ks.status_ready(), None),
        (ks.status_init_failed(), None),
        (ks.status_crash_loop(), None),
    ],
)
def test_only_pods_pulling_or_loading_have_their_pull_log_read(
    status: dict[str, Any], phase: str | None
) -> None:
    assert pull_phase(pod(status=status)) == phase


def test_a_terminating_pod_is_read_no_more() -> None:
    assert (
        pull_phase(pod(status=ks.status_pulling(), deletionTimestamp="2026-01-01T00:00:00Z"))
        is None
    )


def test_progress_rides_on_the_pending_replica_and_turns_to_loading() -> None:
    pulling = Progress("pulling", 1, 4, 1000, 4000, rate=100.0, eta_s=30.0)
    r = replica_status(pod(status=ks.status_pulling()), pulling)
    assert (r.state, r.reason, r.progress) == ("Pending", "PodInitializing", pulling)
    r = replica_status(pod(status=ks.status_starting()), PULLED)
    assert r.state == "Pending" and r.progress is not None
    assert (r.progress.phase, r.progress.bytes_total, r.progress.eta_s) == ("loading", 4000, 0.0)
    assert replica_status(pod(status=ks.status_ready()), PULLED).progress is None  # serving


def test_observation_matches_reports_to_pods_by_name() -> None:
    pods = [pod("svc-abc-00000", ks.status_pulling()), pod("svc-abc-00001", ks.status_pulling())]
    seen = observation([], pods, {"svc-abc-00001": PULLED})
    assert [r.progress for r in seen.replicas] == [None, PULLED]
