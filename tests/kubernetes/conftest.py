"""Fixtures of the kubernetes runtime's tests: a running API stand-in, settings whose
kubeconfig points at it (see ``testing/k8s_server.py``), and the runtime on them, claimed for
the test's installation, with what it notified (a module that needs other settings
overrides ``k8s_settings``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from controlplane.runtime.kubernetes.runtime import KubernetesRuntime
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from testing.k8s_server import ApiStandIn

RESOURCE_GROUPS = {
    "eas-r-a10": {
        "node_selector": {"openeas.io/pool": "a10"},
        "tolerations": [
            {"key": "openeas.io/pool", "operator": "Equal", "value": "a10", "effect": "NoSchedule"}
        ],
    },
    "eas-r-cpu": {"node_selector": {"openeas.io/pool": "cpu"}},
}


@pytest.fixture
def k8s() -> Iterator[ApiStandIn]:
    server = ApiStandIn().start()
    yield server
    server.stop()


@pytest.fixture
def k8s_settings(
    k8s: ApiStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> KubernetesSettings:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    return KubernetesSettings(
        kubeconfig=str(k8s.write_kubeconfig(tmp_path / "kubeconfig")),
        resource_groups=RESOURCE_GROUPS,  # type: ignore[arg-type]
        request_timeout_seconds=5,
    )


# The installation id a test's runtime acts for (a database's, written by migration 0005).
INSTALLATION = "0b7c2f4e-5d1a-4c3e-9f00-000000000001"


async def claimed(
    runtime: KubernetesRuntime, installation: str = INSTALLATION
) -> KubernetesRuntime:
    """``runtime``, once it acts for ``installation`` (as the reconciler's does)."""
    refused = await runtime.claim(installation)
    assert refused is None, refused
    return runtime


class Recorder:
    """The reconciler's side: what ``notify`` was called with."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, service: str) -> None:
        self.names.append(service)


@pytest.fixture
def notified() -> Recorder:
    return Recorder()


@pytest.fixture
async def runtime(
    k8s_settings: KubernetesSettings, notified: Recorder
) -> AsyncIterator[KubernetesRuntime]:
    rt = await claimed(KubernetesRuntime(k8s_settings, notified))
    yield rt
    await rt.close()
