"""EAS's ``queue[backlog]`` metric: async services scale on their input queue's length
(a table of decisions), wake from zero when it is not empty, and read it from a real Redis
(127.0.0.1:6379) the way the gateway keeps the queues."""

from __future__ import annotations

import uuid

import pytest
import redis

from controlplane.elasticity.queues import Backlog, input_key
from controlplane.elasticity.scaling_decision import decide
from controlplane.model.spec import Autoscaler

NOW = 1000.0


def scaler(threshold: float, lo: int = 0, hi: int = 8) -> Autoscaler:
    return Autoscaler.model_validate(
        {
            "min": lo,
            "max": hi,
            "scaleStrategies": [{"metricName": "queue[backlog]", "threshold": threshold}],
            "behavior": {"onZero": {"scaleDownGracePeriodSeconds": 60}} if lo == 0 else {},
        }
    )


@pytest.mark.parametrize(
    ("name", "auto", "current", "backlog", "idle_s", "expected", "words"),
    [
        ("per replica: ceil(backlog / threshold)", scaler(10, lo=1), 1, 35, 0, 4, "queue[backlog]"),
        ("at threshold", scaler(10, lo=1), 2, 20, 0, 2, ""),
        ("clamped to max", scaler(10, lo=1), 2, 1000, 0, 8, ""),
        ("woken at zero by a backlog", scaler(10), 0, 3, 0, 1, "woken by load"),
        ("empty at zero stays there", scaler(10), 0, 0, 0, 0, "idle at zero"),
        ("empty past the grace period: zero", scaler(10), 1, 0, 61, 0, "grace period 60"),
        ("empty within the grace period: kept", scaler(10), 1, 0, 30, 1, ""),
    ],
)
def test_backlog_decisions(
    name: str,
    auto: Autoscaler,
    current: int,
    backlog: float,
    idle_s: float,
    expected: int,
    words: str,
) -> None:
    d = decide(auto, current, {"queue[backlog]": backlog}, (), NOW, idle_s=idle_s)
    assert d.instances == expected, (name, d)
    assert words in d.reason


async def test_backlog_is_the_input_streams_length_and_none_without_redis() -> None:
    prefix = f"test-{uuid.uuid4().hex[:12]}:"
    r = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    backlog = Backlog("redis://127.0.0.1:6379/0", prefix)
    try:
        assert await backlog.of("svc") == 0
        for i in range(1, 4):
            r.xadd(input_key(prefix, "svc"), {"d": b"x"}, id=f"{i}-0")
        assert await backlog.of("svc") == 3
    finally:
        await backlog.close()
        r.delete(input_key(prefix, "svc"))
        r.close()
    nowhere = Backlog("redis://127.0.0.1:1/0", prefix)
    try:
        assert await nowhere.of("svc") is None
    finally:
        await nowhere.close()
