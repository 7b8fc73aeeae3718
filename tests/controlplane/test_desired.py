"""Desired state as a pure function of the stored service (table tests, no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.model.spec import StoredSpec
from controlplane.model.states import ServiceState
from controlplane.reconcile.desired import desired


def state(**changes: Any) -> ServiceState:
    spec: dict[str, Any] = {
        "name": "triton_test",
        "processor": "triton",
        "processor_params": ["--model-repository=oss://b/models"],
        "metadata": {"instance": 2, "cpu": 4, "gpu": 1, "memory": 8000, "resource": "r1"},
    }
    spec.update(changes.pop("spec", {}))
    base = {"name": "triton_test", "uid": "u", "generation": 3}
    base["spec"] = StoredSpec.model_validate(spec)
    return ServiceState(**{**base, "stopped": False, "deleting": False, **changes})


@pytest.mark.parametrize(
    ("kwargs", "replicas"),
    [
        ({}, 2),
        ({"stopped": True}, 0),
        ({"deleting": True}, 0),
        ({"spec": {"metadata": {"instance": 0}}}, 0),
    ],
)
def test_replicas(kwargs: dict[str, Any], replicas: int) -> None:
    assert desired(state(**kwargs)).replicas == replicas


def test_fields_and_object_name() -> None:
    d = desired(state())
    assert d.object_name == "triton-test"
    assert d.params == ("--model-repository=oss://b/models",)
    assert (d.resources.cpu, d.resources.gpu, d.resources.memory_mb) == (4, 1, 8000)
    assert d.resources.resource_group == "r1"
    assert d.generation == 3


@pytest.mark.parametrize(
    ("spec", "same"),
    [
        ({"metadata": {"instance": 5, "cpu": 4, "gpu": 1, "memory": 8000, "resource": "r1"}}, True),
        (
            {
                "metadata": {
                    "instance": 2,
                    "cpu": 4,
                    "gpu": 1,
                    "memory": 8000,
                    "resource": "r1",
                    "rpc": {"keepalive": 5000},
                }
            },
            True,
        ),
        ({"processor_params": ["--model-repository=oss://b/other"]}, False),
        (
            {"metadata": {"instance": 2, "cpu": 8, "gpu": 1, "memory": 8000, "resource": "r1"}},
            False,
        ),
        ({"oss_endpoint": "oss-cn-hangzhou.aliyuncs.com"}, False),
    ],
)
def test_template_hash_changes_only_with_what_needs_new_replicas(
    spec: dict[str, Any], same: bool
) -> None:
    before = desired(state()).template_hash
    assert (desired(state(spec=spec)).template_hash == before) is same


def test_restarts_roll_and_retired_replicas_are_named() -> None:
    before = desired(state())
    assert desired(state(restarts=0)).template_hash == before.template_hash  # as before
    once, twice = desired(state(restarts=1)), desired(state(restarts=2))
    assert len({before.template_hash, once.template_hash, twice.template_hash}) == 3
    retiring = desired(state(retire=("triton_test-3",)))
    assert retiring.retire == frozenset({"triton_test-3"}) and before.retire == frozenset()
    assert retiring.template_hash == before.template_hash  # only the named ones are replaced
