"""Settings of the kubernetes runtime, read from ``OPENEAS_K8S_*``.

The control plane's :class:`controlplane.settings.Settings` embeds one as ``settings.k8s``;
:mod:`.manifests` turns a service into objects with it, :mod:`.client` connects with it, and
``openeas manifests`` reads it from the environment the same way, so the dry run prints
what the runtime would apply.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    SecretStr,
    StringConstraints,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

# What the NVIDIA device plugin advertises, and the taint GPU node pools usually carry.
GPU_RESOURCE = "nvidia.com/gpu"
# Triton's default --exit-timeout-secs: how long it waits for in-flight requests on SIGTERM.
TRITON_EXIT_TIMEOUT_SECONDS = 30


class Toleration(BaseModel):
    """A pod toleration, spelled as in Kubernetes (``tolerationSeconds`` too)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")

    def manifest(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, exclude_none=True)


Percent = Annotated[str, StringConstraints(pattern=r"^[0-9]+%$")]


class Rollout(BaseModel):
    """A Deployment's RollingUpdate: pod counts or percentages, spelled as in Kubernetes
    (``maxSurge``) or as the other settings (``max_surge``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    max_surge: NonNegativeInt | Percent = Field(alias="maxSurge")
    max_unavailable: NonNegativeInt | Percent = Field(alias="maxUnavailable")

    def manifest(self) -> dict[str, int | str]:
        return {"maxSurge": self.max_surge, "maxUnavailable": self.max_unavailable}


# A new replica ready before an old one goes: no capacity lost, one spare slot needed.
SURGE = Rollout(maxSurge=1, maxUnavailable=0)
# One replica down at a time, no spare slot: what a full GPU pool can do.
REPLACE = Rollout(maxSurge=0, maxUnavailable=1)


class ResourceGroup(BaseModel):
    """Where the replicas of services naming this EAS ``metadata.resource`` id run, and how.
    Unset fields fall back to the runtime-wide settings of the same name."""

    model_config = ConfigDict(extra="forbid")

    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    # The extended resource a GPU is requested as: a MIG slice such as
    # "nvidia.com/mig-1g.10gb" on pools partitioned by the device plugin's mixed strategy.
    gpu_resource: str | None = None
    runtime_class_name: str | None = None  # of GPU replicas, e.g. "nvidia"
    # The image of this pool's replicas, e.g. one whose tritonserver has the TensorFlow
    # backend (docs/operations.md, "Processor images and backends").
    processor_image: str | None = None
    rollout: Rollout | None = None  # how its multi-instance GPU services roll


def _gpu_tolerations() -> list[Toleration]:
    return [Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")]


class KubernetesSettings(BaseSettings):
    # "null" unsets an optional field from the environment (OPENEAS_K8S_RUN_AS_USER=null).
    model_config = SettingsConfigDict(
        env_prefix="OPENEAS_K8S_", extra="ignore", env_parse_none_str="null"
    )

    # Where every service's objects live (the control plane needs RBAC there only).
    namespace: str = "openeas-serving"
    # This installation's release name (the chart's), stamped on every object beside the
    # database's installation id; several releases may share one serving namespace.
    release: str = Field(
        default="openeas", min_length=1, max_length=40, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )

    # -- connection: in-cluster service account, or a kubeconfig --------------------------
    # None: in-cluster when KUBERNETES_SERVICE_HOST is set and no kubeconfig is named.
    in_cluster: bool | None = None
    kubeconfig: str | None = None  # default: $KUBECONFIG, then ~/.kube/config
    context: str | None = None
    request_timeout_seconds: float = 30.0

    # -- what a replica runs ------------------------------------------------------------
    # Image with tritonserver and the ``openeas`` entry point; per-processor overrides win.
    processor_image: str = "openeas/processor-triton:0.1.0"
    processor_images: dict[str, str] = Field(default_factory=dict)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(default_factory=list)
    # The image's ``openeas`` executable (the container's command; args come from the plan).
    entrypoint: list[str] = Field(default_factory=lambda: ["openeas"])

    # -- where replicas run ---------------------------------------------------------------
    # EAS ``metadata.resource`` id -> node selector and tolerations; JSON in the environment:
    # {"eas-r-a10": {"node_selector": {"pool": "a10"}, "tolerations": [{"key": "pool",
    #  "operator": "Equal", "value": "a10", "effect": "NoSchedule"}]}}
    resource_groups: dict[str, ResourceGroup] = Field(default_factory=dict)
    # EAS instance type (``cloud.computing.instance_type``) -> node labels; a type not
    # listed selects nodes by node.kubernetes.io/instance-type. JSON in the environment:
    # {"ecs.gn6i-c4g1.xlarge": {"gpu-pool": "t4"}}
    instance_types: dict[str, dict[str, str]] = Field(default_factory=dict)
    # Added when a service asks for GPUs, so GPU nodes' usual taint does not keep it out.
    gpu_tolerations: list[Toleration] = Field(default_factory=_gpu_tolerations)
    gpu_resource: str = GPU_RESOURCE  # what `metadata.gpu` is requested as
    runtime_class_name: str = ""  # of replicas with GPUs (e.g. "nvidia"); empty: the node's
    # Spread each service's replicas over this node label, so one drain or node failure takes
    # as few as the cluster allows (a preference: replicas still start on one node). Empty:
    # no spread constraint.
    spread_topology_key: str = "kubernetes.io/hostname"
    # A PodDisruptionBudget per service: voluntary evictions (drains) take one replica at a
    # time, and wait for its successor to be ready.
    disruption_budget: bool = True
    # How services with GPUs and more than one instance roll (resource groups may override):
    # a surge pod needs a free GPU, which a full pool does not have.
    gpu_rollout: Rollout = REPLACE

    # -- model storage --------------------------------------------------------------------
    # Secret holding OSS_ACCESS_KEY_ID, OSS_ACCESS_KEY_SECRET and optionally
    # OSS_SESSION_TOKEN; only the model-pull init container sees it. Empty: anonymous pulls.
    oss_secret: str = "openeas-oss"
    oss_endpoint: str = ""  # default OSS_ENDPOINT when a spec names none
    oss_region: str = ""  # OSS_REGION, for V4 signatures
    # Bound of the emptyDir the repository is pulled into (its sizeLimit) and the replica's
    # ephemeral-storage request, so the scheduler places it on a node with that much disk
    # and a runaway pull evicts only itself. Empty: unbounded (not recommended).
    model_volume_size: str = "20Gi"
    # The node-local model cache (the chart's modelCache DaemonSet, through its Service with
    # internalTrafficPolicy Local): pull init containers ask it before OSS. Empty: none.
    model_cache_url: str = ""
    # Its token, handed to pull init containers through a Secret the runtime keeps in the
    # serving namespace (manifests.MODEL_CACHE_SECRET), never to the replica's own containers.
    model_cache_token: SecretStr = SecretStr("")
    # Memory-backed /dev/shm: Triton's python backend exchanges tensors through it and the
    # container runtime's default (64Mi) is too small. Empty: no mount.
    shm_size: str = "1Gi"

    # -- replica life cycle ---------------------------------------------------------------
    # How long the serving container may take from start to live (model load) before it is
    # restarted; the pull runs before, in the init container (the probe does not cover it).
    startup_timeout_seconds: int = Field(default=1800, ge=30)
    # A terminating replica keeps serving this long before tritonserver gets SIGTERM: the
    # time for its endpoint to leave every gateway's route table (the pod's readiness → the
    # control plane's watch → the gateways' long poll).
    prestop_seconds: int = Field(default=10, ge=0)
    # preStop + Triton's exit timeout (in-flight requests finish) + a margin; checked below.
    termination_grace_seconds: int = Field(default=60, ge=1)
    run_as_user: int | None = 1000  # the NGC tritonserver images' triton-server user
    service_account: str = ""  # replicas need no API access: no token is mounted

    # -- control loop ---------------------------------------------------------------------
    field_manager: str = "openeas"
    # Relist everything this often even when the watch is quiet (changes missed by a
    # broken watch are found then).
    resync_seconds: float = Field(default=300.0, gt=0)
    watch_timeout_seconds: int = Field(default=240, ge=1)  # server-side end of one watch call
    # While a replica's model pull runs, the tail of its log is read this often for the
    # progress in its status (the pull logs a report every 5 s); only pulling pods cost.
    progress_seconds: float = Field(default=5.0, gt=0)
    # The leader keeps the route table in this ConfigMap of route_snapshot_namespace (the
    # gateways'), for a gateway that starts while no control plane answers
    # (route_snapshot.py); empty: none.
    route_snapshot_configmap: str = ""
    route_snapshot_namespace: str = ""
    # The leader also writes each service event as a Kubernetes Event on the service's
    # Deployment (events.py; the Role needs `create` on events).
    events: bool = True

    @model_validator(mode="after")
    def _grace_covers_prestop_and_exit(self) -> KubernetesSettings:
        least = self.prestop_seconds + TRITON_EXIT_TIMEOUT_SECONDS
        if self.termination_grace_seconds < least:
            raise ValueError(
                f"termination_grace_seconds ({self.termination_grace_seconds}) must be at "
                f"least prestop_seconds + {TRITON_EXIT_TIMEOUT_SECONDS} ({least}): the kubelet "
                "would kill replicas with requests still in flight"
            )
        return self

    def image_for(self, processor: str, group: ResourceGroup | None = None) -> str:
        if group is not None and group.processor_image:
            return group.processor_image
        return self.processor_images.get(processor, self.processor_image)
