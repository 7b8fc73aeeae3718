"""Scale to zero with real Triton: ``openeas up``, a service at zero woken by its first
request (answered, with a ``ColdStart`` event whose process start and Triton load are
apart), then by 16 first requests at once (all answered); and 20 services at zero woken
together, each by one request: every one answered, none lost. The same driver as
``bench/coldstart.py``, one round; prints its report."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.autoscale import platform
from bench.coldstart import Result, one_model, report, run, wake_many

pytestmark = pytest.mark.slow

SERVICES = 20  # each Triton serves add_sub alone: a few seconds' start each on 2 cores


def test_first_requests_at_zero_are_answered_by_real_triton() -> None:
    result = run(rounds=1, concurrent=16, say=lambda _: None)["this"]
    print(report(result))
    assert len(result.cold_s) == 1
    assert result.concurrent_failed == [] and len(result.concurrent_s) == 16
    assert len(result.events) == 2  # one cold start per wake-up, with its breakdown
    for event in result.events:
        assert "(woken by a request)" in event and "Triton load" in event
        # the replica rang when it launched tritonserver: its start is not Triton's load
        assert "process/pod start 0.00 s" not in event


def test_twenty_services_woken_together_are_all_answered(tmp_path: Path) -> None:
    result = Result()
    with platform() as p:
        wake_many(p, SERVICES, one_model(tmp_path), result)
    print(f"{len(result.woken_s)} answered, slowest {max(result.woken_s, default=0):.2f} s")
    assert result.woken_failed == []
    assert len(result.woken_s) == SERVICES
