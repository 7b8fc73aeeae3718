"""Gateway load reports, summed per service over every gateway process that reports.

The control plane's ``SIGNALS_PATH`` handler hands each :class:`contract.wire.LoadReport`
to :meth:`LoadReports.receive`; the leading autoscaler reads :meth:`LoadReports.load` for the
services it evaluates. Each reporter's figures expire after a few of its intervals, so a
gateway that stopped (or a worker that died) stops counting without saying goodbye. Work is
per service named in a report: quiet services cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from contract.wire import LoadReport
from controlplane.elasticity.metrics_history import MetricsHistory

EXPIRE_INTERVALS = 3.0  # a reporter silent this many of its intervals no longer counts
MIN_EXPIRY_S = 3.0


@dataclass(frozen=True, slots=True)
class _Sample:
    expires: float
    qps: float
    concurrency: float


@dataclass(frozen=True, slots=True)
class Load:
    qps: float  # requests/s, all gateways
    concurrency: float  # mean in-flight requests, all gateways
    reporters: int


class LoadReports:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: dict[str, dict[str, _Sample]] = {}  # service → reporter → sample
        # Called with the services of each report (the autoscaler wakes on them).
        self.listeners: list[Callable[[list[str]], None]] = []
        self.leading = False  # True while this process leads the autoscaler
        self.history = MetricsHistory()  # the last hour per service, for the console

    def receive(self, report: LoadReport) -> None:
        self.history.add(report)
        expires = self._clock() + max(MIN_EXPIRY_S, EXPIRE_INTERVALS * report.interval_s)
        names = []
        for load in report.services:
            names.append(load.service)
            per = self._samples.setdefault(load.service, {})
            if load.requests == 0 and load.concurrency == 0:
                per.pop(report.reporter, None)  # went quiet: adds nothing any more
                if not per:
                    del self._samples[load.service]
                continue
            qps = load.requests / report.interval_s
            per[report.reporter] = _Sample(expires, qps, load.concurrency)
        for listener in self.listeners:
            listener(names)

    def load(self, service: str) -> Load:
        """The service's load now, summed over live reporters (zero when none)."""
        per = self._samples.get(service)
        if not per:
            return Load(0.0, 0.0, 0)
        now = self._clock()
        for reporter in [r for r, s in per.items() if s.expires <= now]:
            del per[reporter]
        if not per:
            del self._samples[service]
            return Load(0.0, 0.0, 0)
        live = per.values()
        return Load(sum(s.qps for s in live), sum(s.concurrency for s in live), len(per))

    def active(self) -> set[str]:
        """Services some reporter counts traffic for (possibly expired: read ``load``)."""
        return set(self._samples)
