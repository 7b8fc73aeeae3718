"""The autoscaler's decision: a pure function of a service's ``autoscaler``, its instance
count, what was measured and the recent recommendations. The leader's loop
(:mod:`controlplane.elasticity.scaling_loop`) calls it and writes the result the way a manual scale
does; tests read it as a table.

Per strategy, as Kubernetes' HPA: desired = ceil(current × value per replica / threshold),
unchanged inside a 10 % band around the threshold; the largest desired count of the
strategies wins, clamped to [min, max]. Stabilization: a scale-up goes to the smallest
recommendation of its window (window 0: at once), a scale-down to the largest of its window,
so a dip shorter than the window never removes a replica.

Capacity coming: qps and concurrency are service totals, spread over ``current`` — the count
asked for, ready or not — so desired = ceil(total / threshold) and a burst does not ask
again while the new replicas start. cpu and queue_time_ms are means over the ``ready``
replicas that measured them, so they scale from ``ready``: while asked-for replicas start,
the same measurement asks for no more than it did.

To zero and back (``min: 0``, ``behavior.onZero``): the usual rules keep at least one
replica; after ``scaleDownGracePeriodSeconds`` without a request (``idle_s``, counted from
the last request or wake-up, and for an async service from the last time its backlog was
not empty: the caller's to count) the service goes straight to zero — the grace period is that
step's window, so the scale-down window does not add to it. At zero only load counts: none
keeps it there, some wakes it with at least ``scaleUpActivationReplicas``. The windows start
afresh on either side of zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.model.spec import Autoscaler

TOLERANCE = 0.1
# Measured for the whole service (summed over gateways, or its queue's length); the others
# are per-replica means.
ADDITIVE = frozenset({"qps", "concurrency", "queue[backlog]"})

History = tuple[tuple[float, int], ...]  # (time, recommendation), oldest first


@dataclass(frozen=True)
class Decision:
    instances: int  # what the service should have now
    reason: str  # why, for the event when ``instances`` differs from the current count
    history: History  # to pass to the next call


def _recommend(
    autoscaler: Autoscaler, current: int, ready: int, values: Mapping[str, float]
) -> tuple[int, str]:
    """The largest count any strategy with a value asks for, and that strategy's reason."""
    best, why = -1, "no metric values yet"
    for strategy in autoscaler.scaleStrategies:
        name, threshold = strategy.metricName, strategy.threshold
        value = values.get(name)
        if value is None:
            continue
        additive = name in ADDITIVE
        base = max(current if additive else ready, 1)
        ratio = (value / base if additive else value) / threshold
        want = current if abs(ratio - 1.0) <= TOLERANCE else math.ceil(base * ratio - 1e-9)
        if want > best:
            sign = ">" if ratio > 1 else "<" if ratio < 1 else "="
            limit = f"{threshold:g} × {base}" if additive else f"{threshold:g}"
            best, why = want, f"{name} {value:.1f} {sign} {limit}"
    return (current if best < 0 else best), why


def decide(
    autoscaler: Autoscaler,
    current: int,
    values: Mapping[str, float],
    history: History,
    now: float,
    ready: int | None = None,
    idle_s: float = 0.0,
) -> Decision:
    """``values``: metric name → value (qps and concurrency for the whole service, cpu and
    queue_time_ms per ready replica; ``ready`` defaults to ``current``); a metric without a
    value is left out of the decision. ``idle_s``: seconds without a request or wake-up
    (only read with ``min: 0``)."""
    rec, why = _recommend(autoscaler, current, current if ready is None else ready, values)
    if autoscaler.to_zero:
        on_zero = autoscaler.on_zero
        if current == 0:
            if not any(values.get(m, 0.0) > 0 for m in ADDITIVE):
                return Decision(0, "idle at zero", ())
            woken = min(autoscaler.max, max(rec, on_zero.scaleUpActivationReplicas))
            return Decision(woken, f"woken by load: {why}", ((now, woken),))
        grace = on_zero.scaleDownGracePeriodSeconds
        if idle_s >= grace:
            return Decision(0, f"no request for {idle_s:.0f} s (grace period {grace} s)", ())
    low = max(autoscaler.min, 1)  # zero only by the grace period above

    def clamp(n: int) -> int:
        return max(low, min(autoscaler.max, n))

    rec = clamp(rec)
    up_s = autoscaler.behavior.scaleUp.stabilizationWindowSeconds
    down_s = autoscaler.behavior.scaleDown.stabilizationWindowSeconds
    up = min([rec, *(r for t, r in history if t > now - up_s)])
    down = max([rec, *(r for t, r in history if t > now - down_s)])
    instances = clamp(min(max(current, up), down))
    if clamp(current) != current:  # the range itself moved
        why = f"{current} outside [{low}, {autoscaler.max}]"
    keep = max(up_s, down_s)
    kept = tuple((t, r) for t, r in history if t > now - keep)
    return Decision(instances, why, (*kept, (now, rec)))
