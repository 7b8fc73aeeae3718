"""Settings of the kubernetes runtime, read from ``OPENEAS_K8S_*``.

The control plane's :class:`controlplane.settings.Settings` embeds one as ``settings.k8s``;
:mod:`.manifests` turns a service into objects with it, :mod:`.client` connects with it, and
``openeas manifests`` reads it from the environment the same way, so the dry run prints
what the runtime would apply.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# What the NVIDIA device plugin advertises, and the taint GPU node pools usually carry.
GPU_RESOURCE = "nvidia.com/gpu"


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


class ResourceGroup(BaseModel):
    """Where the replicas of services naming this EAS ``metadata.resource`` id may run."""

    model_config = ConfigDict(extra="forbid")

    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)


def _gpu_tolerations() -> list[Toleration]:
    return [Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")]


class KubernetesSettings(BaseSettings):
    # "null" unsets an optional field from the environment (OPENEAS_K8S_RUN_AS_USER=null).
    model_config = SettingsConfigDict(
        env_prefix="OPENEAS_K8S_", extra="ignore", env_parse_none_str="null"
    )

    # Where every service's objects live (the control plane needs RBAC there only).
    namespace: str = "openeas-serving"

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
    # Added when a service asks for GPUs, so GPU nodes' usual taint does not keep it out.
    gpu_tolerations: list[Toleration] = Field(default_factory=_gpu_tolerations)

    # -- model storage --------------------------------------------------------------------
    # Secret holding OSS_ACCESS_KEY_ID, OSS_ACCESS_KEY_SECRET and optionally
    # OSS_SESSION_TOKEN; only the model-pull init container sees it. Empty: anonymous pulls.
    oss_secret: str = "openeas-oss"
    oss_endpoint: str = ""  # default OSS_ENDPOINT when a spec names none
    oss_region: str = ""  # OSS_REGION, for V4 signatures
    model_volume_size: str = ""  # emptyDir sizeLimit of the pulled repository, e.g. "50Gi"
    # Memory-backed /dev/shm: Triton's python backend exchanges tensors through it and the
    # container runtime's default (64Mi) is too small. Empty: no mount.
    shm_size: str = "1Gi"

    # -- replica life cycle ---------------------------------------------------------------
    # How long a replica may take from start to live (pull + model load) before restarting.
    startup_timeout_seconds: int = Field(default=1800, ge=30)
    termination_grace_seconds: int = Field(default=60, ge=1)
    run_as_user: int | None = 1000  # the NGC tritonserver images' triton-server user
    service_account: str = ""  # replicas need no API access: no token is mounted

    # -- control loop ---------------------------------------------------------------------
    field_manager: str = "openeas"
    # Relist everything this often even when the watch is quiet (changes missed by a
    # broken watch are found then).
    resync_seconds: float = Field(default=300.0, gt=0)
    watch_timeout_seconds: int = Field(default=240, ge=1)  # server-side end of one watch call

    def image_for(self, processor: str) -> str:
        return self.processor_images.get(processor, self.processor_image)
