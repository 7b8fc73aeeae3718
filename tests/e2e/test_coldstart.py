"""Scale to zero with real Triton: ``openeas up``, a service at zero woken by its first
request (answered, with a ``ColdStart`` event), then by 16 first requests at once (all
answered). The same driver as ``bench/coldstart.py``, one round; prints its report."""

from __future__ import annotations

import pytest

from bench.coldstart import report, run

pytestmark = pytest.mark.slow


def test_first_requests_at_zero_are_answered_by_real_triton() -> None:
    result = run(rounds=1, concurrent=16, say=lambda _: None)["this"]
    print(report(result))
    assert len(result.cold_s) == 1
    assert result.concurrent_failed == [] and len(result.concurrent_s) == 16
    assert len(result.events) == 2  # one cold start per wake-up, with its breakdown
    for event in result.events:
        assert "(woken by a request)" in event and "Triton load" in event
