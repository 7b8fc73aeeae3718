"""The autoscaler's decision as a table: one formula, tolerance, clamp, several strategies,
stabilization windows, capacity coming."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.elasticity.scaling_decision import History, decide
from controlplane.model.spec import Autoscaler


def scaler(
    *strategies: tuple[str, float], lo: int = 1, hi: int = 8, up: int = 0, down: int = 300
) -> Autoscaler:
    return Autoscaler.model_validate(
        {
            "min": lo,
            "max": hi,
            "scaleStrategies": [{"metricName": m, "threshold": t} for m, t in strategies],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": up},
                "scaleDown": {"stabilizationWindowSeconds": down},
            },
        }
    )


QPS = scaler(("qps", 100))
NOW = 1000.0

Case = tuple[str, Autoscaler, int, int | None, dict[str, float], History, int, str]
CASES: list[Case] = [
    # name, autoscaler, current, ready (None: = current), values, history, expected, reason
    ("at threshold", QPS, 2, None, {"qps": 200}, (), 2, ""),
    ("inside +10 %", QPS, 2, None, {"qps": 219}, (), 2, ""),
    ("inside -10 %", QPS, 2, None, {"qps": 181}, (), 2, ""),
    ("up: ceil(total / threshold)", QPS, 1, None, {"qps": 250}, (), 3, "qps 250.0 > 100 × 1"),
    ("up clamped to max", QPS, 2, None, {"qps": 5000}, (), 8, "qps"),
    ("no data holds", QPS, 3, None, {}, (), 3, "no metric"),
    (
        "concurrency as the issue writes it",
        scaler(("concurrency", 2), hi=3),
        1,
        None,
        {"concurrency": 7.4},
        (),
        3,
        "concurrency 7.4 > 2 × 1",
    ),
    (
        "largest strategy wins",
        scaler(("qps", 100), ("concurrency", 4)),
        1,
        None,
        {"qps": 150, "concurrency": 19},
        (),
        5,
        "concurrency 19.0 > 4 × 1",
    ),
    (
        "per-replica mean: queue time",
        scaler(("queue_time_ms", 10)),
        2,
        2,
        {"queue_time_ms": 25},
        (),
        5,
        "queue_time_ms 25.0 > 10",
    ),
    ("capacity coming: 3 asked, load for 3", QPS, 3, 1, {"qps": 290}, ((NOW - 1, 3),), 3, ""),
    (
        "capacity coming: queue time of the 1 ready of 3 asked",
        scaler(("queue_time_ms", 10)),
        3,
        1,
        {"queue_time_ms": 30},
        ((NOW - 1, 3),),
        3,
        "",
    ),
    ("cpu of 1 ready scales from 1", scaler(("cpu", 50)), 2, 1, {"cpu": 90}, ((NOW, 2),), 2, ""),
    ("cpu up", scaler(("cpu", 50)), 2, 2, {"cpu": 90}, (), 4, "cpu 90.0 > 50"),
    # Scale-down waits for the window: an earlier higher recommendation holds.
    ("down held by the window", QPS, 3, None, {"qps": 0}, ((NOW - 100, 3),), 3, ""),
    ("down after the window", QPS, 3, None, {"qps": 0}, ((NOW - 301, 3),), 1, "qps 0.0 < 100 × 3"),
    (
        "down to the window's largest",
        QPS,
        4,
        None,
        {"qps": 0},
        ((NOW - 400, 4), (NOW - 10, 2)),
        2,
        "qps",
    ),
    (
        "down without window",
        scaler(("qps", 100), down=0),
        4,
        None,
        {"qps": 100},
        ((NOW - 1, 4),),
        1,
        "",
    ),
    # Scale-up window: only a sustained rise counts.
    (
        "up held by its window",
        scaler(("qps", 100), up=30),
        1,
        None,
        {"qps": 400},
        ((NOW - 5, 1),),
        1,
        "",
    ),
    (
        "up to the window's smallest",
        scaler(("qps", 100), up=30),
        1,
        None,
        {"qps": 400},
        ((NOW - 40, 1), (NOW - 20, 3), (NOW - 5, 5)),
        3,
        "qps",
    ),
    (
        "min raises a low count",
        scaler(("qps", 100), lo=2),
        1,
        None,
        {"qps": 100},
        (),
        2,
        "1 outside [2, 8]",
    ),
    (
        "max lowers a high count",
        scaler(("qps", 100), hi=2),
        5,
        None,
        {"qps": 500},
        (),
        2,
        "5 outside [1, 2]",
    ),
]


@pytest.mark.parametrize(
    ("auto", "current", "ready", "values", "history", "expected", "reason"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decide(
    auto: Autoscaler,
    current: int,
    ready: int | None,
    values: dict[str, float],
    history: History,
    expected: int,
    reason: str,
) -> None:
    decision = decide(auto, current, values, history, NOW, ready)
    assert decision.instances == expected
    assert reason in decision.reason
    assert decision.history[-1][0] == NOW


def test_history_keeps_only_the_longest_window() -> None:
    old: Any = ((NOW - 1000, 5), (NOW - 299, 4))
    assert decide(QPS, 4, {"qps": 400}, old, NOW).history == ((NOW - 299, 4), (NOW, 4))


def test_steady_load_does_not_flap() -> None:
    """Noise of ±9 % around the threshold × replicas never changes the count."""
    history: History = ()
    for i in range(200):
        qps = 300 * (1 + (0.09 if i % 2 else -0.09))
        d = decide(QPS, 3, {"qps": qps}, history, NOW + i)
        history = d.history
        assert d.instances == 3


def to_zero(grace: int = 600, activation: int = 1, hi: int = 8, down: int = 300) -> Autoscaler:
    auto = scaler(("qps", 100), lo=0, hi=hi, down=down)
    on_zero = {"scaleDownGracePeriodSeconds": grace, "scaleUpActivationReplicas": activation}
    return Autoscaler.model_validate(
        {
            **auto.model_dump(exclude_none=True),
            "behavior": {**auto.behavior.model_dump(exclude_none=True), "onZero": on_zero},
        }
    )


IDLE: dict[str, float] = {"qps": 0, "concurrency": 0}
ZeroCase = tuple[str, Autoscaler, int, dict[str, float], History, float, int, str]
ZERO_CASES: list[ZeroCase] = [
    # name, autoscaler, current, values, history, idle_s, expected, reason
    ("idle inside the grace period keeps one", to_zero(), 1, IDLE, (), 599, 1, ""),
    ("grace period over: to zero", to_zero(), 1, IDLE, (), 600, 0, "no request for 600 s"),
    ("straight to zero from several", to_zero(), 3, IDLE, ((NOW - 10, 3),), 700, 0, "grace"),
    (
        "the scale-down window does not add to the grace",
        to_zero(down=900),
        1,
        IDLE,
        ((NOW - 10, 2),),
        600,
        0,
        "grace period 600 s",
    ),
    ("grace 0: at once when idle", to_zero(grace=0), 1, IDLE, (), 0, 0, "no request"),
    ("load keeps replicas whatever idle_s says", to_zero(), 1, {"qps": 150}, (), 0, 2, "qps"),
    ("down to one, not zero, by the window", to_zero(down=0), 3, {"qps": 20}, (), 0, 1, "qps"),
    ("at zero without load: stays", to_zero(), 0, IDLE, (), 5000, 0, "idle at zero"),
    ("at zero, no values at all: stays", to_zero(), 0, {}, (), 0, 0, "idle at zero"),
    (
        "load at zero wakes with the activation count",
        to_zero(activation=2),
        0,
        {"qps": 10},
        (),
        5000,
        2,
        "woken by load",
    ),
    (
        "load at zero above the activation count",
        to_zero(activation=1),
        0,
        {"qps": 450},
        (),
        5000,
        5,
        "woken by load: qps",
    ),
    ("concurrency alone wakes too", to_zero(), 0, {"qps": 0, "concurrency": 1}, (), 0, 1, "woken"),
    ("waking is clamped to max", to_zero(activation=2, hi=2), 0, {"qps": 900}, (), 0, 2, "woken"),
    ("min 1 never goes to zero", scaler(("qps", 100), lo=1, down=0), 1, IDLE, (), 10**6, 1, ""),
]


@pytest.mark.parametrize(
    ("auto", "current", "values", "history", "idle_s", "expected", "reason"),
    [c[1:] for c in ZERO_CASES],
    ids=[c[0] for c in ZERO_CASES],
)
def test_decide_to_zero_and_back(
    auto: Autoscaler,
    current: int,
    values: dict[str, float],
    history: History,
    idle_s: float,
    expected: int,
    reason: str,
) -> None:
    decision = decide(auto, current, values, history, NOW, idle_s=idle_s)
    assert decision.instances == expected
    assert reason in decision.reason
    if expected == 0 or current == 0:  # the windows start afresh on either side of zero
        assert decision.history in ((), ((NOW, expected),))


def test_windows_after_a_wake_up_do_not_remember_zero() -> None:
    """Woken with 1, a burst right after scales up at once: no 0 in the up window."""
    auto = Autoscaler.model_validate(
        {
            **to_zero().model_dump(exclude_none=True),
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 30},
                "onZero": {"scaleDownGracePeriodSeconds": 60},
            },
        }
    )
    woken = decide(auto, 0, {"qps": 50}, (), NOW, idle_s=1000)
    assert woken.instances == 1
    later = decide(auto, 1, {"qps": 350}, woken.history, NOW + 40, idle_s=0)
    assert later.instances == 4
