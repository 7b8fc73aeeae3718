"""Which EAS fields this installation honours, on which runtime, and why not where it does
not: the table ``docs/spec.md`` prints and ``describe`` reads.

The API's describe calls :func:`not_honoured` with the stored spec and the runtime's name:
for each field the spec carries that this runtime does not act on, one line saying which
field and why, so nothing a user wrote is dropped silently. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from controlplane.model.spec import StoredSpec

Runtime = Literal["local", "kubernetes"]
Status = Literal["honoured", "kubernetes", "ignored"]

NO_IMAGES = (
    "the local runtime runs no images: a tritonserver command runs through the local "
    "Triton processor (tritonserver from this machine), any other command as a local process"
)
LOCAL_PORTS = "the local runtime gives each replica free loopback ports"
SIDECARS = "containers[1:]"  # the containers beside the first, which serves
LOCAL_PROBES = "the local runtime probes Triton's /v2/health/ready (or the container's port)"


@dataclass(frozen=True)
class Field:
    path: str  # dotted, ``[]`` for list items
    status: Status
    why: str = ""  # for kubernetes: why the local runtime cannot; for ignored: why not
    # Recorded as a NotHonoured event at create (else describe alone says so): off for the
    # seed config's own fields, which the local runtime has always run without.
    event: bool = True


FIELDS: tuple[Field, ...] = (
    Field("name", "honoured"),
    Field("metadata.name", "honoured", "the same as name"),
    Field("metadata.workspace_id", "ignored", "stored and shown; OpenEAS has no workspaces"),
    Field("metadata.instance", "honoured"),
    Field("metadata.cpu", "honoured"),
    Field("metadata.memory", "honoured"),
    Field("metadata.gpu", "kubernetes", "the local runtime does not reserve GPUs", event=False),
    Field(
        "metadata.resource",
        "kubernetes",
        "resource groups are Kubernetes node pools",
        event=False,
    ),
    Field("metadata.rpc.keepalive", "honoured"),
    Field("metadata.rpc.max_queue_size", "honoured"),
    Field("metadata.rpc.rate_limit", "honoured"),
    Field("metadata.rpc.enable_sigterm", "honoured"),
    Field("metadata.rolling_strategy.max_surge", "honoured"),
    Field("metadata.rolling_strategy.max_unavailable", "honoured"),
    Field("metadata.eas.termination_grace_period", "honoured"),
    Field("labels", "honoured"),
    Field("containers[].image", "kubernetes", NO_IMAGES),
    Field("containers[].command", "honoured"),
    Field("containers[].script", "honoured"),
    Field("containers[].port", "kubernetes", LOCAL_PORTS),
    Field("containers[].env", "honoured"),
    Field(
        "containers[].prepare",
        "ignored",
        "images run as built: install the requirements into the image (or, locally, into "
        "the Python that runs the replica)",
    ),
    Field("containers[].startup_check", "kubernetes", LOCAL_PROBES),
    Field("containers[].liveness_check", "kubernetes", LOCAL_PROBES),
    Field("containers[].readiness_check", "kubernetes", LOCAL_PROBES),
    Field(SIDECARS, "kubernetes", "the local runtime runs the first container only"),
    Field("storage[].oss", "honoured"),
    Field("storage[].nfs", "kubernetes", "the local runtime mounts nothing"),
    Field(
        "storage[].empty_dir",
        "kubernetes",
        "local replicas share this machine's /dev/shm (each with its own shm prefix)",
    ),
    Field("cloud.computing.instance_type", "kubernetes", "one machine has no instance types"),
    Field("cloud.computing.instances", "kubernetes", "one machine has no instance types"),
    Field(
        "model_path",
        "ignored",
        "the triton processor reads its repository from --model-repository",
    ),
)

BY_PATH = {f.path: f for f in FIELDS}


def not_honoured(
    spec: StoredSpec, runtime: Runtime, *, events: bool = False
) -> list[dict[str, str]]:
    """``[{"field": path, "reason": why}]`` for each field the spec carries that
    ``runtime`` does not act on, in the table's order; ``events``: only those worth a
    NotHonoured event."""
    present = _paths(spec.public())
    out = []
    for field in FIELDS:
        if field.status == "honoured" or field.path not in present:
            continue
        if field.status == "kubernetes" and runtime == "kubernetes":
            continue
        if events and not field.event:
            continue
        prefix = "not honoured on the local runtime: " if field.status == "kubernetes" else ""
        out.append({"field": field.path, "reason": prefix + field.why})
    if runtime == "local" and spec.containers and len(spec.containers) > 1:
        why = BY_PATH[SIDECARS].why
        out.append({"field": SIDECARS, "reason": f"not honoured on the local runtime: {why}"})
    return out


def _paths(value: Any, prefix: str = "") -> set[str]:
    """Every dotted path in ``value``, list items as ``[]``."""
    # A count left at 0 (metadata.gpu's default) asks for nothing to honour.
    out = {prefix} if prefix and not (type(value) is int and value == 0) else set()
    if isinstance(value, dict):
        for key, child in value.items():
            out |= _paths(child, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        for item in value:
            out |= _paths(item, prefix + "[]")
    return out


def table() -> str:
    """The Markdown table of docs/spec.md's "EAS fields" section."""
    words = {
        "honoured": "honoured",
        "kubernetes": "honoured on Kubernetes only",
        "ignored": "accepted and ignored",
    }
    rows = ["| field | here | why |", "|---|---|---|"]
    rows += [f"| `{f.path}` | {words[f.status]} | {f.why} |" for f in FIELDS]
    return "\n".join(rows)
