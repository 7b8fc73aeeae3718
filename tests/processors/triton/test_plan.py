"""processors.triton.plan: the replica a runtime starts for a triton service (pure)."""

from __future__ import annotations

import sys

import pytest

from processors import registry
from processors.base import Ports, ProcessorError, Pull
from processors.triton import plan

PORTS = Ports(http=18080, grpc=18081, metrics=18082)
RUN = ["processor", "run", "triton", "--http-port", "18080", "--grpc-port", "18081"]
RUN += ["--metrics-port", "18082"]


def test_plan_runs_the_processor_with_the_platforms_ports() -> None:
    replica = registry.get("triton").plan(
        ["--model-repository=oss://bucket/models", "--log-verbose", "1"],
        PORTS,
        "http://oss-cn-hangzhou-internal.aliyuncs.com",
        None,
    )
    args = [*RUN, "--host", "127.0.0.1", "--"]
    args += ["--model-repository=oss://bucket/models", "--log-verbose=1"]
    assert replica.openeas_args == args
    assert replica.command == [sys.executable, "-m", "openeas.cli", *args]
    assert replica.env == {"OSS_ENDPOINT": "http://oss-cn-hangzhou-internal.aliyuncs.com"}
    assert replica.http_port == 18080
    assert (replica.readiness_path, replica.liveness_path) == (
        "/v2/health/ready",
        "/v2/health/live",
    )
    assert replica.pull is None  # no model_dir: the replica pulls into its own cache


def test_plan_with_a_model_dir_serves_the_pulled_copy() -> None:
    replica = plan.plan(["--model-repository=oss://bucket/m", "--log-verbose=1"], PORTS, None, "/x")
    assert replica.pull == Pull("oss://bucket/m", "/x")
    assert replica.openeas_args[-3:] == ["--", "--model-repository=/x", "--log-verbose=1"]


def test_plan_with_a_model_dir_keeps_a_local_repository_in_place() -> None:
    replica = plan.plan(["--model-repository=/models"], PORTS, None, "/x")
    assert replica.pull is None
    assert replica.openeas_args[-1] == "--model-repository=/models"


def test_plan_in_a_pod_listens_on_all_addresses_and_keeps_the_env_endpoint() -> None:
    replica = plan.plan(["--model-repository=/models"], Ports(1, 2, 3, host="0.0.0.0"), None, None)
    assert replica.openeas_args[-4:] == ["--host", "0.0.0.0", "--", "--model-repository=/models"]
    assert replica.env == {}


def test_plan_refuses_what_validate_refuses() -> None:
    with pytest.raises(ProcessorError, match="not allowed"):
        plan.plan(["--model-repository=/m", "--http-port=1"], PORTS, None, None)
