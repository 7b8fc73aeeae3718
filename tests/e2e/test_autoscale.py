"""The autoscaler end to end: ``openeas up`` with real Triton replicas, load through the
gateway, scale-up within 2 s of the load crossing the threshold, scale-down after the
window, no failed request. The same driver as ``bench/autoscale.py``, shorter phases."""

from __future__ import annotations

import pytest

from bench.autoscale import Params, report, run

pytestmark = pytest.mark.slow


def test_scale_up_and_down_with_real_triton() -> None:
    params = Params(metric="qps", warm_s=2.0, high_s=8.0, mid_s=0.0, window_s=2)
    result = run(params, log=lambda _: None)
    print(report(result, params))
    assert result.failed == []
    assert result.decision_s is not None and result.decision_s < 2.0
    assert result.serving_s is not None
    assert max(spec for _, spec, _, _ in result.timeline) > 1
    assert result.back_to_min_s is not None
    assert result.events[0][1].startswith("scaled 1→")
