"""The pod parts of EAS's ``containers[]`` and ``storage[]`` form, and ``cloud``'s
instance types: pure, called by :mod:`.manifests` for a desired replica set that carries an
:class:`~controlplane.runtime.base.Image` or mounts.

The serving container runs the user's image with its command. A ``tritonserver`` command
keeps the user's (allow-listed, normalised) flags and gets the platform's after them, as
the processor gives every replica (ports, addresses, admin-API fences, shm prefix): the
image runs no ``openeas``, so the fence key is the pod's UID and the shm prefix its name,
both read by Kubernetes into the arguments (``$(VAR)``), never written in the object.
Each OSS mount is pulled by an init container of the processor image (today's pull:
CRC-checked, through the node cache when on) into a volume mounted at ``mount_path``.
"""

from __future__ import annotations

from typing import Any

from controlplane.runtime.base import DesiredReplicaSet, Image, Mount
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from processors import registry
from processors.base import Ports

Manifest = dict[str, Any]

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ADMIN_KEY_ENV = "OPENEAS_ADMIN_KEY"
POD_NAME_ENV = "OPENEAS_POD_NAME"
DEFAULT_PORT = 8000
# A Triton container without its own checks is probed as the processor's replicas are.
TRITON_PROBES = {
    "startup": "/v2/health/live",
    "readiness": "/v2/health/ready",
    "liveness": "/v2/health/live",
}


def http_port(image: Image) -> int:
    """The port the gateway sends traffic to: the container's, else Triton's default."""
    return image.port or DEFAULT_PORT


def volume_name(index: int) -> str:
    return f"mount-{index}"


def volumes(desired: DesiredReplicaSet, settings: KubernetesSettings) -> list[Manifest]:
    """One volume per ``storage[]`` entry, in order."""
    out: list[Manifest] = []
    for i, mount in enumerate(desired.mounts):
        name = volume_name(i)
        if mount.kind == "nfs":
            nfs = {"server": mount.server, "path": mount.source, "readOnly": mount.read_only}
            out.append({"name": name, "nfs": nfs})
        elif mount.kind == "memory":
            source: Manifest = {"medium": "Memory"}
            if mount.size_gb:
                source["sizeLimit"] = f"{mount.size_gb}Gi"
            out.append({"name": name, "emptyDir": source})
        else:  # oss: filled by its init container
            source = {"sizeLimit": settings.model_volume_size} if settings.model_volume_size else {}
            out.append({"name": name, "emptyDir": source})
    return out


def volume_mounts(desired: DesiredReplicaSet) -> list[Manifest]:
    return [
        {"name": volume_name(i), "mountPath": m.path, "readOnly": m.read_only}
        for i, m in enumerate(desired.mounts)
    ]


def oss_pulls(desired: DesiredReplicaSet) -> list[tuple[str, Mount, str]]:
    """(init container name, mount, volume name) for each OSS mount."""
    return [
        (f"mount-pull-{i}", m, volume_name(i))
        for i, m in enumerate(desired.mounts)
        if m.kind == "oss"
    ]


def mounts_shm(desired: DesiredReplicaSet) -> bool:
    """The spec sizes /dev/shm itself (the runtime's default shm volume then stays out)."""
    return any(m.path.rstrip("/") == "/dev/shm" for m in desired.mounts)


def node_selector(desired: DesiredReplicaSet, settings: KubernetesSettings) -> dict[str, str]:
    """``cloud.computing``'s first instance type as node labels: the chart's mapping for
    it, else the well-known instance-type label."""
    if not desired.instance_types:
        return {}
    first = desired.instance_types[0]
    mapped = settings.instance_types.get(first)
    return dict(mapped) if mapped is not None else {INSTANCE_TYPE_LABEL: first}


def serve(image: Image, container: Manifest) -> Manifest:
    """Fill ``container`` (name, resources, security made by the caller) with the user's
    image, command, port, env and checks."""
    port = http_port(image)
    env: list[Manifest] = [{"name": k, "value": v} for k, v in image.env]
    ports = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    argv = list(image.argv)
    if image.triton:
        pod_ports = Ports(port, _free(port, 8001), _free(port, 8002), host="0.0.0.0")
        triton = registry.get("triton")
        assert triton.image_args is not None
        shm = f"openeas_$({POD_NAME_ENV})_"
        argv = [argv[0], *triton.image_args(argv[1:], pod_ports, f"$({ADMIN_KEY_ENV})", shm)]
        env += [
            {"name": ADMIN_KEY_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]
        ports += [
            {"name": "grpc", "containerPort": pod_ports.grpc, "protocol": "TCP"},
            {"name": "metrics", "containerPort": pod_ports.metrics, "protocol": "TCP"},
        ]
    container.update(image=image.image, ports=ports)
    if argv:
        container["command"], container["args"] = argv[:1], argv[1:]
    else:
        container.pop("command", None)
        container.pop("args", None)
    container["env"] = env + list(container.get("env", []))
    checks = dict(image.checks)
    for kind in ("startup", "readiness", "liveness"):
        key = f"{kind}Probe"
        check = checks.get(kind)
        if check is not None:
            container[key] = probe(check)
        elif image.triton:
            container[key] = _http_probe(TRITON_PROBES[kind], kind)
        elif kind != "liveness":
            container[key] = {"tcpSocket": {"port": "http"}, **_timing(kind)}
        else:
            container.pop(key, None)
    return container


def sidecar(image: Image, container: Manifest) -> Manifest:
    """A container beside the serving one, as written: its port named ``side-<port>``, its
    checks as probes, no default probe."""
    container["image"] = image.image
    if image.argv:
        container["command"], container["args"] = list(image.argv[:1]), list(image.argv[1:])
    if image.port:
        name = f"side-{image.port}"
        container["ports"] = [{"name": name, "containerPort": image.port, "protocol": "TCP"}]
    if image.env:
        container["env"] = [{"name": k, "value": v} for k, v in image.env]
    for kind, check in image.checks:
        container[f"{kind}Probe"] = probe(check)
    return container


def _free(http: int, port: int) -> int:
    return port if port != http else port + 10


def _timing(kind: str) -> Manifest:
    if kind == "startup":
        return {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 180}
    if kind == "readiness":
        return {"periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 3}
    return {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6}


def _http_probe(path: str, kind: str) -> Manifest:
    return {"httpGet": {"path": path, "port": "http"}, **_timing(kind)}


PROBE_FIELDS = {
    "initial_delay_seconds": "initialDelaySeconds",
    "period_seconds": "periodSeconds",
    "timeout_seconds": "timeoutSeconds",
    "failure_threshold": "failureThreshold",
    "success_threshold": "successThreshold",
}


def probe(check: dict[str, Any]) -> Manifest:
    """An EAS check as a Kubernetes probe (field for field)."""
    out: Manifest = {}
    if "http_get" in check:
        get = check["http_get"]
        out["httpGet"] = {"path": get.get("path", "/"), "port": get["port"]}
    elif "tcp_socket" in check:
        out["tcpSocket"] = {"port": check["tcp_socket"]["port"]}
    else:
        command = check["exec"]["command"]
        out["exec"] = {"command": command if isinstance(command, list) else ["sh", "-c", command]}
    for ours, theirs in PROBE_FIELDS.items():
        if ours in check:
            out[theirs] = check[ours]
    return out
