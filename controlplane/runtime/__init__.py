"""Runtimes: where replicas run. :func:`make_runtime` picks one from the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from controlplane.runtime.base import Notify, Runtime

if TYPE_CHECKING:  # settings import the kubernetes runtime's settings from this package
    from controlplane.settings import Settings


def make_runtime(settings: Settings, notify: Notify) -> Runtime:
    if settings.runtime == "kubernetes":
        from controlplane.runtime.kubernetes.runtime import KubernetesRuntime

        return KubernetesRuntime(settings.k8s, notify)
    from controlplane.runtime.local import LocalRuntime

    return LocalRuntime(settings.data_dir, notify)
