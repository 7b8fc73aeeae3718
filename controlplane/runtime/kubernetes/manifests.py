"""The Kubernetes objects of one service: a pure function of its desired replica set and the
runtime's settings.

:class:`~.runtime.KubernetesRuntime` applies exactly these objects and ``openeas manifests``
prints them, so what a user reads, diffs or ``kubectl apply``s is what the platform runs.
Tested table-style and schema-checked with ``kubernetes-validate``; no I/O here.

Each service gets a Deployment (an init container pulls the model repository into a bounded
``emptyDir``, the processor container serves it), a ClusterIP Service and, unless turned
off, a PodDisruptionBudget (drains take one replica at a time). Every object
carries :data:`HASH_ANNOTATION`, a digest of the object itself, so the runtime skips the
write when nothing changed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from typing import Any

from controlplane.runtime.base import (
    READY_PROBE_FAILURES,
    DesiredReplicaSet,
    PermanentRuntimeError,
)
from controlplane.runtime.kubernetes import images
from controlplane.runtime.kubernetes.ownership import LABEL_PREFIX, MANAGED_BY, Owner
from controlplane.runtime.kubernetes.settings import (
    SURGE,
    KubernetesSettings,
    ResourceGroup,
    Rollout,
)
from processors import registry
from processors.base import READY_FILE_ENV, Ports, ProcessorError, Pull, ReplicaPlan
from processors.model_cache.wire import TOKEN_ENV as NODE_CACHE_TOKEN_ENV
from processors.storage.node_cache import ENV_URL as NODE_CACHE_ENV

Manifest = dict[str, Any]

SERVICE_LABEL = LABEL_PREFIX + "service"  # the EAS name (label values may hold '_')
UID_LABEL = LABEL_PREFIX + "service-uid"
GENERATION_LABEL = LABEL_PREFIX + "generation"
TEMPLATE_HASH_LABEL = LABEL_PREFIX + "template-hash"  # DesiredReplicaSet.template_hash
HASH_ANNOTATION = LABEL_PREFIX + "desired-hash"
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=openeas," + SERVICE_LABEL

PROCESSOR_CONTAINER = "processor"
PULL_CONTAINER = "model-pull"
MODEL_DIR = "/models"
MODEL_REPOSITORY = MODEL_DIR + "/repository"  # what the init container pulls into
WARM_UP_PULL_CONTAINER = "warm-up-pull"
WARM_UP_DIR = MODEL_DIR + "/warm-up"  # remote warm_up_data_path files, pulled beside it
# Created by the processor once its warm-up requests are replayed; the startup probe waits
# for it, and readiness is only probed after the startup probe passed.
READY_FILE = "/tmp/openeas-ready"
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
POD_PORTS = Ports(HTTP_PORT, GRPC_PORT, METRICS_PORT, host="0.0.0.0")  # on the pod's own IP

# Secret keys the OSS client reads from its environment (processors.storage.oss).
OSS_SECRET_KEYS = (
    ("OSS_ACCESS_KEY_ID", False),
    ("OSS_ACCESS_KEY_SECRET", False),
    ("OSS_SESSION_TOKEN", True),  # STS credentials only
)
STARTUP_PERIOD_SECONDS = 10
# The NVIDIA container runtime exposes the GPUs this names; the NGC images set "all", so a
# container that asked for none would see every GPU of its node without this.
NO_GPUS = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


def selector(service: str) -> str:
    """The label selector of everything made for ``service``."""
    return f"{SERVICE_LABEL}={service}"


def check_resource_group(resource: str | None, settings: KubernetesSettings) -> str | None:
    """Why ``metadata.resource`` cannot be placed (an unknown id), naming the known ids; None
    when it can. The API calls it at create/update time so the user gets a 4xx."""
    if resource is None or resource in settings.resource_groups:
        return None
    known = ", ".join(sorted(settings.resource_groups)) or "none are configured"
    return f"unknown resource group {resource!r}; known resource groups: {known}"


def desired_objects(
    desired: DesiredReplicaSet, settings: KubernetesSettings, owner: Owner | None = None
) -> list[Manifest]:
    """The Deployment, Service and PodDisruptionBudget for ``desired``, each (and each pod)
    labelled with ``owner``'s identity (None only for a dry run). Raises
    PermanentRuntimeError when the spec cannot be placed (unknown resource group, params the
    processor rejects)."""
    problem = check_resource_group(desired.resources.resource_group, settings)
    if problem is not None:
        raise PermanentRuntimeError("UnknownResourceGroup", problem)
    objects = [_deployment(desired, settings), _service(desired, settings)]
    if settings.disruption_budget:
        objects.append(_disruption_budget(desired, settings))
    if owner is not None:
        for o in objects:
            o["metadata"]["labels"].update(owner.labels())
        objects[0]["spec"]["template"]["metadata"]["labels"].update(owner.labels())
    return [_stamped(o) for o in objects]


MODEL_CACHE_SECRET = "openeas-model-cache"
CACHE_TOKEN_KEY = "token"


def model_cache_secret(settings: KubernetesSettings, owner: Owner | None = None) -> Manifest | None:
    """The Secret the pull init containers read the node cache's token from, in the serving
    namespace (the chart's generated token lives in the release namespace, which a pod
    cannot reference). None without a cache (or without its token: then none is used)."""
    token = settings.model_cache_token.get_secret_value()
    if not (settings.model_cache_url and token):
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": MODEL_CACHE_SECRET,
            "labels": {**MANAGED_BY, **(owner.labels() if owner else {})},
        },
        "type": "Opaque",
        "data": {CACHE_TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def rollout(desired: DesiredReplicaSet, settings: KubernetesSettings) -> Rollout:
    """How the service's Deployment replaces its pods. Surge by default; services holding
    GPUs with more than one instance replace one pod at a time instead, since a surge pod
    waits for a free GPU that a full pool never has (a single instance keeps surging: a
    replace would take the service down). A resource group's own rollout wins, and the
    service's own ``metadata.rolling_strategy`` over both."""
    if desired.rolling is not None:
        return Rollout(maxSurge=desired.rolling[0], maxUnavailable=desired.rolling[1])
    group = _group(desired, settings)
    if group is not None and group.rollout is not None:
        return group.rollout
    if desired.resources.gpu > 0 and desired.replicas > 1:
        return settings.gpu_rollout
    return SURGE


def object_hash(manifest: Manifest) -> str:
    """Digest of a manifest without its own hash annotation."""
    body = json.loads(json.dumps(manifest))
    body["metadata"].get("annotations", {}).pop(HASH_ANNOTATION, None)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _stamped(manifest: Manifest) -> Manifest:
    manifest["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = object_hash(manifest)
    return manifest


def _metadata(desired: DesiredReplicaSet, settings: KubernetesSettings) -> Manifest:
    return {
        "name": desired.object_name,
        "namespace": settings.namespace,
        "labels": {
            **MANAGED_BY,
            "app.kubernetes.io/name": desired.object_name,
            SERVICE_LABEL: desired.service,
            UID_LABEL: desired.uid,
            GENERATION_LABEL: str(desired.generation),
        },
    }


def _deployment(desired: DesiredReplicaSet, settings: KubernetesSettings) -> Manifest:
    # The generation is left out of the pod labels: scaling bumps it and must not roll pods.
    pod_labels = {
        **MANAGED_BY,
        "app.kubernetes.io/name": desired.object_name,
        SERVICE_LABEL: desired.service,
        UID_LABEL: desired.uid,
        TEMPLATE_HASH_LABEL: desired.template_hash,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(desired, settings),
        "spec": {
            "replicas": desired.replicas,
            "selector": {"matchLabels": {SERVICE_LABEL: desired.service}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": rollout(desired, settings).manifest(),
            },
            "revisionHistoryLimit": 3,
            # Only a condition for humans; the startup probe is what restarts a stuck replica.
            "progressDeadlineSeconds": settings.startup_timeout_seconds + 600,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": _pod_spec(desired, settings),
            },
        },
    }


def _pod_spec(desired: DesiredReplicaSet, settings: KubernetesSettings) -> Manifest:
    plan = _plan(desired, settings)
    group = _group(desired, settings)
    image = settings.image_for("triton" if desired.image else desired.processor, group)
    tolerations = [t.manifest() for t in group.tolerations] if group else []
    if desired.resources.gpu > 0:
        tolerations += [t.manifest() for t in settings.gpu_tolerations]
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    init: list[Manifest] = []
    pulls = [
        (name, pull)
        for name, pull in ((PULL_CONTAINER, plan.pull), (WARM_UP_PULL_CONTAINER, plan.warm_up_pull))
        if pull is not None
    ]
    if pulls:
        volumes.append(_empty_dir("models", settings.model_volume_size))
        mounts.append({"name": "models", "mountPath": MODEL_DIR, "readOnly": True})
    for name, pull in pulls:
        init.append(_pull_container(name, pull, plan.env, image, desired, settings))
    for name, mount, volume in images.oss_pulls(desired):
        pull = Pull(mount.source, mount.path)
        init.append(
            _pull_container(name, pull, plan.env, image, desired, settings, volume, mount.path)
        )
    volumes += images.volumes(desired, settings)
    mounts += images.volume_mounts(desired)
    if settings.shm_size and not images.mounts_shm(desired):  # counts against the memory
        volumes.append(_empty_dir("dshm", settings.shm_size, medium="Memory"))
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    spec: Manifest = {
        "automountServiceAccountToken": False,
        # Service links put every Service of the namespace into each replica's environment.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": _grace(desired, settings),
        "securityContext": _pod_security(settings),
    }
    if init:
        spec["initContainers"] = init
    spec["containers"] = [_processor_container(plan, image, mounts, desired, settings)]
    for i, sidecar in enumerate(desired.sidecars, start=1):
        base: Manifest = {
            "name": f"sidecar-{i}",
            "imagePullPolicy": settings.image_pull_policy,
            "securityContext": _container_security(),
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
        if mounts:
            base["volumeMounts"] = list(mounts)
        spec["containers"].append(images.sidecar(sidecar, base))
    if volumes:
        spec["volumes"] = volumes
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    selector = {**images.node_selector(desired, settings), **(group.node_selector if group else {})}
    if selector:
        spec["nodeSelector"] = selector
    if tolerations:
        spec["tolerations"] = tolerations
    runtime_class = (group and group.runtime_class_name) or settings.runtime_class_name
    if desired.resources.gpu > 0 and runtime_class:
        spec["runtimeClassName"] = runtime_class
    if settings.spread_topology_key:
        spec["topologySpreadConstraints"] = [_spread(desired, settings.spread_topology_key)]
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in settings.image_pull_secrets]
    return spec


def _grace(desired: DesiredReplicaSet, settings: KubernetesSettings) -> int:
    """``metadata.eas.termination_grace_period``, else the runtime's."""
    grace = desired.termination_grace_seconds
    return settings.termination_grace_seconds if grace is None else grace


def _group(desired: DesiredReplicaSet, settings: KubernetesSettings) -> ResourceGroup | None:
    return settings.resource_groups.get(desired.resources.resource_group or "")


def _spread(desired: DesiredReplicaSet, topology_key: str) -> Manifest:
    return {
        "maxSkew": 1,
        "topologyKey": topology_key,
        # A preference: on a pool of one node, or with nodes full, replicas still start.
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {SERVICE_LABEL: desired.service}},
        # Count only the pods of the same template, so a rollout's new pods spread too.
        "matchLabelKeys": [TEMPLATE_HASH_LABEL],
    }


def _plan(desired: DesiredReplicaSet, settings: KubernetesSettings) -> ReplicaPlan:
    """The processor's plan for a pod. A remote repository is pulled by the init container
    into :data:`MODEL_REPOSITORY` (``plan.pull``) and served from there, so the serving
    container needs neither credentials nor a second look at OSS."""
    endpoint = desired.oss_endpoint or settings.oss_endpoint or None
    if desired.image is not None and not desired.image.triton:
        return ReplicaPlan(command=[], env={"OSS_ENDPOINT": endpoint} if endpoint else {})
    try:
        processor = registry.get(desired.processor)
        plan = processor.plan(
            desired.params,
            POD_PORTS,
            endpoint,
            MODEL_REPOSITORY,
            warm_up=desired.warm_up,
            warm_up_dir=WARM_UP_DIR,
        )
    except ProcessorError as e:
        raise PermanentRuntimeError("InvalidProcessorParams", e.one_line()) from e
    if desired.image is not None:
        # The image serves; only the pulls' environment (OSS endpoint) is the plan's.
        return ReplicaPlan(command=[], env=plan.env)
    if not plan.openeas_args:
        raise PermanentRuntimeError(
            "UnsupportedProcessor",
            f"processor {desired.processor!r} has no openeas command to run in a container",
        )
    return plan


def _processor_container(
    plan: ReplicaPlan,
    image: str,
    mounts: list[Manifest],
    desired: DesiredReplicaSet,
    settings: KubernetesSettings,
) -> Manifest:
    resources = _resources(desired)
    env = [{"name": k, "value": v} for k, v in sorted(plan.env.items())]
    startup = _probe(
        plan.liveness_path,
        period=STARTUP_PERIOD_SECONDS,
        failures=math.ceil(settings.startup_timeout_seconds / STARTUP_PERIOD_SECONDS),
    )
    if plan.warms_up:
        env.append({"name": READY_FILE_ENV, "value": READY_FILE})
        del startup["httpGet"]
        startup["exec"] = {"command": ["test", "-e", READY_FILE]}
    if desired.resources.gpu > 0:
        group = _group(desired, settings)
        gpu = (group and group.gpu_resource) or settings.gpu_resource
        resources["requests"][gpu] = str(desired.resources.gpu)
        resources["limits"][gpu] = str(desired.resources.gpu)
    else:
        env.append(NO_GPUS)
    if plan.pull is not None and settings.model_volume_size:
        # The emptyDir counts against the pod's ephemeral storage: ask for what it may hold.
        resources["requests"]["ephemeral-storage"] = settings.model_volume_size
    container: Manifest = {
        "name": PROCESSOR_CONTAINER,
        "image": image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": list(settings.entrypoint),
        "args": list(plan.openeas_args),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": resources,
        "startupProbe": startup,
        "readinessProbe": _probe(plan.readiness_path, period=5, failures=READY_PROBE_FAILURES),
        # A replica busy with long inferences may answer slowly; restart only when it is
        # clearly gone.
        "livenessProbe": _probe(plan.liveness_path, period=10, failures=6),
        "securityContext": _container_security(),
        # The processor's last lines (``openeas: <reason>``) become the termination message
        # the runtime reports, without reading logs.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    prestop = settings.prestop_seconds
    if desired.enable_sigterm is False:
        # EAS's rpc.enable_sigterm false: no signal before the grace period is over.
        prestop = _grace(desired, settings)
    if prestop:
        # Serve on while the gateways learn the pod is going (its readiness drops at once),
        # then tritonserver gets SIGTERM and finishes what is in flight.
        sleep = ["sleep", str(prestop)]
        container["lifecycle"] = {"preStop": {"exec": {"command": sleep}}}
    if env:
        container["env"] = env
    if mounts:
        container["volumeMounts"] = mounts
    if desired.image is not None:
        container = images.serve(desired.image, container)
    return container


def _pull_container(
    name: str,
    pull: Pull,
    plan_env: dict[str, str],
    image: str,
    desired: DesiredReplicaSet,
    settings: KubernetesSettings,
    volume: str = "models",
    mount_at: str = MODEL_DIR,
) -> Manifest:
    # OSS_ENDPOINT comes in plan_env: _plan passes the spec's or the settings' endpoint.
    env: list[Manifest] = [{"name": k, "value": v} for k, v in sorted(plan_env.items())]
    env.append(NO_GPUS)  # the pull needs none, whatever the replica holds
    if settings.oss_region:
        env.append({"name": "OSS_REGION", "value": settings.oss_region})
    if model_cache_secret(settings) is not None:
        env += [
            {"name": NODE_CACHE_ENV, "value": settings.model_cache_url},
            {
                "name": NODE_CACHE_TOKEN_ENV,
                "valueFrom": {"secretKeyRef": {"name": MODEL_CACHE_SECRET, "key": CACHE_TOKEN_KEY}},
            },
        ]
    if settings.oss_secret:
        env += [
            {
                "name": key,
                "valueFrom": {
                    "secretKeyRef": {"name": settings.oss_secret, "key": key, "optional": optional}
                },
            }
            for key, optional in OSS_SECRET_KEYS
        ]
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": list(settings.entrypoint),
        "args": ["processor", "pull", pull.uri, pull.into],
        "env": env,
        # The pull shares the replica's CPU and memory (init containers run before it), but
        # not its GPUs.
        "resources": _resources(desired),
        "volumeMounts": [{"name": volume, "mountPath": mount_at}],
        "securityContext": _container_security(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _resources(desired: DesiredReplicaSet) -> dict[str, dict[str, str]]:
    # requests == limits: Guaranteed QoS, so a replica is the last to be evicted and gets
    # the whole cores it asked for (EAS sells cpu/memory as fixed amounts).
    amounts = {"cpu": str(desired.resources.cpu), "memory": f"{desired.resources.memory_mb}Mi"}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _probe(path: str, *, period: int, failures: int) -> Manifest:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _empty_dir(name: str, size: str, *, medium: str = "") -> Manifest:
    source: Manifest = {}
    if medium:
        source["medium"] = medium
    if size:
        source["sizeLimit"] = size
    return {"name": name, "emptyDir": source}


def _pod_security(settings: KubernetesSettings) -> Manifest:
    context: Manifest = {"seccompProfile": {"type": "RuntimeDefault"}}
    if settings.run_as_user is not None:
        context.update(
            runAsNonRoot=True,
            runAsUser=settings.run_as_user,
            runAsGroup=settings.run_as_user,
            fsGroup=settings.run_as_user,  # so the emptyDir is writable by that user
        )
    return context


def _container_security() -> Manifest:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _disruption_budget(desired: DesiredReplicaSet, settings: KubernetesSettings) -> Manifest:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(desired, settings),
        "spec": {
            # Not minAvailable: a single-instance service must not block a node drain forever.
            "maxUnavailable": 1,
            "selector": {"matchLabels": {SERVICE_LABEL: desired.service}},
            # A replica that is not ready (crash-looping, stuck pulling) serves nothing:
            # evicting it must not wait on the budget.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def _service(desired: DesiredReplicaSet, settings: KubernetesSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(desired, settings),
        "spec": {
            "type": "ClusterIP",
            "selector": {SERVICE_LABEL: desired.service},
            "ports": [
                {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                for name, port in (
                    ("http", HTTP_PORT),
                    ("grpc", GRPC_PORT),
                    ("metrics", METRICS_PORT),
                )
            ],
        },
    }
