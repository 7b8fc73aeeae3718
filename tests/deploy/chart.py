"""The Helm chart rendered by Helm's own engine, for the deployment tests.

``helm-python-sdk`` binds Helm v4's Go SDK (``libhelm_c``) through ctypes: no helm binary, no
cluster. :func:`render` is ``helm template`` (values checked against values.schema.json first,
``lookup`` answering nothing, as offline); :func:`install_dry_run` is ``helm install
--dry-run=client`` (adds the install-time checks such as the chart's kubeVersion, and NOTES).
``VALUE_SETS`` are the configurations every test renders: the ones an operator reaches for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "openeas"
RELEASE, NAMESPACE = "openeas", "openeas"
Obj = dict[str, Any]

A10 = {
    "nodeSelector": {"openeas.io/pool": "a10"},
    "tolerations": [
        {"key": "openeas.io/pool", "operator": "Equal", "value": "a10", "effect": "NoSchedule"}
    ],
}
VALUE_SETS: dict[str, Obj] = {
    "defaults": {},
    "external database": {
        "postgresql": {"enabled": False},
        "database": {"url": "postgresql+psycopg://openeas:s3cret@pg.example:5432/openeas"},
        "auth": {"adminToken": "an-admin-token-for-tests"},
    },
    "existing secrets": {
        "postgresql": {"enabled": False},
        "database": {"existingSecret": "openeas-db", "existingSecretKey": "url"},
        "auth": {"existingSecret": "openeas-admin"},
        "oss": {"existingSecret": "oss-keys", "endpoint": "oss-cn-hangzhou.aliyuncs.com"},
    },
    "ingress": {
        "gateway": {
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "host": "predict.example.com",
                "tlsSecret": "predict-tls",
                "annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "64m"},
            },
            "grpc": {
                "ingress": {
                    "enabled": True,
                    "className": "nginx",
                    "host": "grpc.example.com",
                    "tlsSecret": "grpc-tls",
                },
            },
            "config": {"domain": "eas.example.com"},
        },
        "controlplane": {"ingress": {"enabled": True, "host": "eas.example.com"}},
    },
    "hpa": {
        "gateway": {
            "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 20},
            "service": {"type": "LoadBalancer", "port": 80, "annotations": {"lb": "internal"}},
            "workers": 2,
        },
        "publicUrl": "http://203.0.113.10",
    },
    "gpu resource groups": {
        "clusterId": "cn-hangzhou",
        "serving": {
            "namespace": "openeas-serving",
            "createNamespace": True,
            "processorImage": {
                "repository": "registry.example.com/openeas/processor-triton",
                "tag": "0.1.0-cuda12",
                "pullPolicy": "Always",
            },
            "imagePullSecrets": ["regcred"],
            "resourceGroups": {
                "eas-r-a10": A10,
                "eas-r-cpu": {"nodeSelector": {"openeas.io/pool": "cpu"}},
            },
            "config": {"modelVolumeSize": "50Gi", "startupTimeoutSeconds": 3600},
        },
        "oss": {
            "endpoint": "oss-cn-hangzhou-internal.aliyuncs.com",
            "region": "cn-hangzhou",
            "accessKeyId": "LTAI-test-id",
            "accessKeySecret": "test-secret-value",
        },
        "imagePullSecrets": ["regcred"],
    },
    "model cache": {"modelCache": {"enabled": True}},
}


def render(values: Obj | None = None, *, namespace: str = NAMESPACE) -> list[Obj]:
    """Every object the chart renders (hooks included), in template order."""
    with helm.Chart.load(CHART) as chart:
        files = chart.render(values or {}, name=RELEASE, namespace=namespace)
    objects: list[Obj] = []
    for name, text in sorted(files.items()):
        if name.endswith(".txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def notes(values: Obj | None = None) -> str:
    with helm.Chart.load(CHART) as chart:
        files = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return files[f"{CHART.name}/templates/NOTES.txt"]


def install_dry_run(values: Obj | None = None) -> dict[str, Any]:
    """``helm install --dry-run=client`` with in-memory release storage."""
    with helm.Config(storage_driver="memory", namespace=NAMESPACE) as config:
        return dict(config.install(CHART, RELEASE, values or {}, dry_run="client"))


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def container(objects: list[Obj], kind: str, name: str, container: str) -> Obj:
    spec = find(objects, kind, name)["spec"]["template"]["spec"]
    pods = spec.get("initContainers", []) + spec["containers"]
    return next(c for c in pods if c["name"] == container)
