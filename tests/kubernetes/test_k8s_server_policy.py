"""The stand-in's PodDisruptionBudgets (``policy/v1``), through the unmodified client: served
and discovered like the other kinds, and refused as the real API server refuses them."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.runtime.base import PermanentRuntimeError
from controlplane.runtime.kubernetes.client import DISRUPTION_BUDGET, KubeClient
from controlplane.runtime.kubernetes.settings import KubernetesSettings


def budget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b", "labels": {"app.kubernetes.io/managed-by": "openeas"}},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, **spec},
    }


def test_budgets_are_applied_listed_and_deleted(k8s_settings: KubernetesSettings) -> None:
    client = KubeClient(k8s_settings)
    try:
        client.apply(budget(maxUnavailable=1), field_manager="t")
        [live], _ = client.list(DISRUPTION_BUDGET, "app.kubernetes.io/managed-by=openeas")
        assert live["spec"]["maxUnavailable"] == 1
        assert client.delete(DISRUPTION_BUDGET, "b") is True
        assert client.get(DISRUPTION_BUDGET, "b") is None
    finally:
        client.close()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"minAvailable": 1, "maxUnavailable": 1}, "cannot be both set"),
        ({"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "Sometimes"}, "Sometimes"),
        ({"maxUnavailable": 1, "minReady": 1}, "minReady"),  # not a field
    ],
)
def test_invalid_budgets_are_refused(
    k8s_settings: KubernetesSettings, spec: dict[str, Any], message: str
) -> None:
    client = KubeClient(k8s_settings)
    try:
        with pytest.raises(PermanentRuntimeError) as caught:
            client.apply(budget(**spec), field_manager="t")
        assert caught.value.reason == "Invalid" and message in caught.value.message
    finally:
        client.close()
