"""Runtimes: where replicas run. :func:`make_runtime` picks one from the settings."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from controlplane.runtime.base import LogSource, Notify, Runtime
from controlplane.runtime.kubernetes.settings import KubernetesSettings


class Settings(Protocol):
    """What picks and configures a runtime: :class:`controlplane.settings.Settings` (which
    embeds the kubernetes runtime's settings, so this package does not import it back)."""

    @property
    def runtime(self) -> str: ...

    @property
    def data_dir(self) -> Path: ...

    @property
    def k8s(self) -> KubernetesSettings: ...


def make_runtime(settings: Settings, notify: Notify) -> Runtime:
    if settings.runtime == "kubernetes":
        from controlplane.runtime.kubernetes.runtime import KubernetesRuntime

        return KubernetesRuntime(settings.k8s, notify)
    from controlplane.runtime.local import LocalRuntime

    return LocalRuntime(settings.data_dir, notify)


def make_log_source(settings: Settings) -> LogSource:
    """Replica logs without running the runtime: every control-plane replica answers them."""
    if settings.runtime == "kubernetes":
        from controlplane.runtime.kubernetes.logs import KubernetesLogs

        return KubernetesLogs(settings.k8s)
    from controlplane.runtime.local import LocalLogs

    return LocalLogs(settings.data_dir)
