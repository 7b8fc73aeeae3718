"""Runtimes: where replicas run. :func:`make_runtime` picks one from the settings."""

from __future__ import annotations

from controlplane.runtime.base import Notify, Runtime
from controlplane.settings import Settings


def make_runtime(settings: Settings, notify: Notify) -> Runtime:
    if settings.runtime == "kubernetes":
        from controlplane.runtime.kubernetes.runtime import KubernetesRuntime

        return KubernetesRuntime(settings.k8s, notify)
    from controlplane.runtime.local import LocalRuntime

    return LocalRuntime(settings.data_dir, notify)
