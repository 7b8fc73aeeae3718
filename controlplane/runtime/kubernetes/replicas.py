"""What a service's pods say about its replicas: Kubernetes status → :class:`ReplicaStatus`.

:meth:`~.runtime.KubernetesRuntime.observe` calls :func:`observation` with the objects it
listed. Pure, so every pod state the kubelet and scheduler report is tested without a
cluster. A replica that cannot work until something changes (bad params, a missing model,
no server binary: the exit codes of :mod:`processors.exits`; an invalid image name) is
``permanent``; a crash loop or an image still being retried is not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from contract.progress import Progress
from controlplane.runtime.base import Observation, ReplicaState, ReplicaStatus, ReplicaSummary
from controlplane.runtime.kubernetes.manifests import (
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    PROCESSOR_CONTAINER,
    PULL_CONTAINER,
    TEMPLATE_HASH_LABEL,
    WARM_UP_PULL_CONTAINER,
)
from processors import exits

Object = dict[str, Any]

# Exit codes after which restarting the same container cannot help.
PERMANENT_EXITS = set(exits.PERMANENT)
IMAGE_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
PERMANENT_IMAGE_REASONS = {"InvalidImageName", "ErrImageNeverPull"}
# The kubelet cannot create the container: a missing Secret or key, a bad command.
CREATE_REASONS = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
MAX_MESSAGE = 2000  # a termination message holds up to 80 log lines; keep the last ones


def observation(
    deployments: list[Object], pods: list[Object], pulls: Mapping[str, Progress] | None = None
) -> Observation:
    """The replicas of one service, in :func:`replica_pods` order. ``pulls``: the last
    progress report of each pod (by name) in :func:`pull_phase`, read from its pull's log."""
    live = replica_pods(pods)
    replicas = [replica_status(p, (pulls or {}).get(_name(p))) for p in live]
    for deployment in deployments:
        missing = _not_created(deployment, len(live))
        if missing is not None:
            replicas.append(missing)
    return Observation(replicas)


def summary(deployment: Object) -> ReplicaSummary:
    """A Deployment in one line: replicas asked for, ready, and its pod template's hash."""
    spec = deployment.get("spec") or {}
    wanted = int(spec.get("replicas") or 0)
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    template = labels.get(TEMPLATE_HASH_LABEL, "")
    ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
    return ReplicaSummary(wanted, ready, frozenset({template}) if wanted else frozenset())


def replica_pods(pods: list[Object]) -> list[Object]:
    """The pods that are replicas, ordered by name: replica ``i`` of ``observe`` and
    ``logs``. Finished pods (evicted, or exited under a restartPolicy that leaves them) are
    not: their Deployment has replaced them."""
    return sorted((p for p in pods if _phase(p) not in ("Succeeded", "Failed")), key=_name)


def pull_phase(pod: Object) -> Literal["pulling", "loading"] | None:
    """Where a pod's progress comes from: its model pull still running (``pulling``: read
    the log again while it runs), or done with the server up and not ready yet
    (``loading``: the pull's last report, read once). None for every other pod, whose logs
    are never read."""
    if pod["metadata"].get("deletionTimestamp") or _phase(pod) not in ("Pending", "Running"):
        return None
    pull = _container_state(pod, "initContainerStatuses", PULL_CONTAINER)
    if "running" in pull:
        return "pulling"
    pulled = (pull.get("terminated") or {}).get("exitCode") == 0
    # The server up: not crashing, nor waiting to restart.
    up = "running" in _container_state(pod, "containerStatuses", PROCESSOR_CONTAINER)
    if pulled and up and _condition(pod, "Ready").get("status") != "True":
        return "loading"
    return None


def _container_state(pod: Object, kind: str, name: str) -> Object:
    statuses: list[Object] = (pod.get("status") or {}).get(kind) or []
    return next((c.get("state") or {} for c in statuses if c.get("name") == name), {})


def replica_status(pod: Object, pulled: Progress | None = None) -> ReplicaStatus:
    """``pulled``: the pod's last pull report, if :func:`pull_phase` read one."""
    metadata = pod["metadata"]
    status = pod.get("status") or {}
    name = metadata["name"]
    template = (metadata.get("labels") or {}).get(TEMPLATE_HASH_LABEL, "")
    init = status.get("initContainerStatuses") or []
    main = status.get("containerStatuses") or []
    restarts = sum(int(c.get("restartCount") or 0) for c in init + main)

    def replica(
        state: ReplicaState, reason: str = "", message: str = "", **kw: Any
    ) -> ReplicaStatus:
        return ReplicaStatus(
            name, template, state, restarts=restarts, reason=reason, message=_tail(message), **kw
        )

    if metadata.get("deletionTimestamp"):
        return replica("Terminating")
    if _phase(pod) == "Running" and _condition(pod, "Ready").get("status") == "True":
        ip = status.get("podIP")
        return replica(
            "Running",
            endpoint=f"http://{ip}:{_http_port(pod)}",
            metrics=f"http://{ip}:{METRICS_PORT}",
            grpc_endpoint=f"http://{ip}:{GRPC_PORT}",
        )
    for container in init + main:
        problem = _container_problem(container, pod)
        if problem is not None:
            state, reason, message, permanent = problem
            return replica(state, reason, message, permanent=permanent)
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False":
        reason = scheduled.get("reason") or "Unschedulable"
        return replica("Pending", reason, scheduled.get("message") or "")
    phase = pull_phase(pod) if pulled is not None else None
    if phase == "loading" and pulled is not None:
        pulled = dataclasses.replace(pulled, phase="loading", eta_s=0.0)
    return replica("Pending", *_progress(init + main), progress=pulled if phase else None)


def _container_problem(
    container: Object, pod: Object
) -> tuple[ReplicaState, str, str, bool] | None:
    """(state, reason, message, permanent) when this container keeps the replica from
    serving in a way a human should hear about."""
    name = container.get("name", "")
    state = container.get("state") or {}
    waiting = state.get("waiting") or {}
    reason = waiting.get("reason", "")
    if reason in IMAGE_REASONS:
        permanent = reason in PERMANENT_IMAGE_REASONS
        return (
            ("Failed" if permanent else "CrashLoopBackOff"),
            reason,
            waiting.get("message", ""),
            permanent,
        )
    if reason in CREATE_REASONS:
        return "CrashLoopBackOff", reason, waiting.get("message", ""), False
    ended = state.get("terminated") or {}
    if not ended and reason == "CrashLoopBackOff":
        ended = (container.get("lastState") or {}).get("terminated") or {}
    if not ended or (ended.get("exitCode") == 0 and ended.get("reason") != "OOMKilled"):
        return None
    code = int(ended.get("exitCode") or 0)
    permanent = code in PERMANENT_EXITS
    message = _exit_message(name, code, ended, pod)
    if ended.get("reason") == "OOMKilled":
        why = "OOMKilled"
    elif name in (PULL_CONTAINER, WARM_UP_PULL_CONTAINER):
        why = "ModelPullFailed"
    else:
        why = reason or ended.get("reason") or "Error"
    return ("Failed" if permanent else "CrashLoopBackOff"), why, message, permanent


def _exit_message(name: str, code: int, ended: Object, pod: Object) -> str:
    said = (ended.get("message") or "").strip()
    if ended.get("reason") == "OOMKilled":
        limit = _memory_limit(pod, name)
        said = f"container {name} ran out of memory (limit {limit}); raise metadata.memory" + (
            f"\n{said}" if said else ""
        )
    return f"{said}\n(container {name} exited with code {code})".strip()


def _memory_limit(pod: Object, container: str) -> str:
    spec = pod.get("spec") or {}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if c.get("name") == container:
            return str(((c.get("resources") or {}).get("limits") or {}).get("memory", "unset"))
    return "unset"


def _progress(containers: list[Object]) -> tuple[str, str]:
    """Why a healthy replica is not ready yet: the kubelet's waiting reason (e.g.
    ContainerCreating, PodInitializing), else it is up and loading its models."""
    for c in containers:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return waiting["reason"], waiting.get("message", "")
    return "Starting", ""


def _not_created(deployment: Object, pods: int) -> ReplicaStatus | None:
    """A placeholder replica when the Deployment cannot create pods at all (quota, admission
    webhooks): no pod exists to tell why, only the Deployment's ReplicaFailure condition."""
    status = deployment.get("status") or {}
    failure = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "ReplicaFailure"), None
    )
    wanted = int((deployment.get("spec") or {}).get("replicas") or 0)
    if failure is None or failure.get("status") != "True" or pods >= wanted:
        return None
    labels = (((deployment.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}
    return ReplicaStatus(
        name=f"{deployment['metadata']['name']} (not created)",
        template_hash=labels.get(TEMPLATE_HASH_LABEL, ""),
        state="Pending",
        reason=failure.get("reason") or "FailedCreate",
        message=_tail(failure.get("message") or ""),
    )


def _condition(pod: Object, kind: str) -> Object:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _phase(pod: Object) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _name(pod: Object) -> str:
    return str(pod["metadata"]["name"])


def _tail(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else "…" + message[-MAX_MESSAGE:]


def _http_port(pod: dict[str, Any]) -> int:
    """The processor container's port named ``http``: the platform's, or the port of an
    EAS ``containers[]`` entry."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == PROCESSOR_CONTAINER:
            for port in container.get("ports") or []:
                if port.get("name") == "http":
                    return int(port.get("containerPort") or HTTP_PORT)
    return HTTP_PORT
