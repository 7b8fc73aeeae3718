"""Benchmark of the autoscaler: a bounded ramp of load against ``openeas up`` with real Triton.

Run by hand (``python bench/autoscale.py``); ``tests/e2e/test_autoscale.py`` runs the same
with shorter phases. It starts ``openeas up`` on a free loopback port in a temporary data
dir, creates ``add_sub`` (``examples/models``, python backend on CPU) with an autoscaler
(min 1, max 4, scale-down window ``--window``), then drives load through the gateway,
127.0.0.1 only, for fixed durations, in three levels and then none:

- ``--metric qps`` (default): paced clients at 60 → 250 → 120 requests/s, threshold 100
  per replica (so 1 → 3 → 2 → 1 replicas);
- ``--metric concurrency``: 1 → 8 → 4 closed-loop clients, threshold 2 in flight per
  replica. Closed-loop in-flight counts grow as replicas are taken away (each request waits
  longer), so on a small machine this load can sit between two counts; qps does not.

and prints the replica timeline, the time from the load crossing the threshold to the
autoscaler's decision and to the new replica serving (ready and in the gateway's table),
the requests that failed (there must be none), and the time back to min once the load stops.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SERVICE = "autoscale_bench"
INFER = json.dumps(
    {
        "inputs": [
            {"name": n, "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}
            for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()


PACED_THREADS = 8
LEVELS = {"qps": ((60.0, 250.0, 120.0), 100.0), "concurrency": ((1.0, 8.0, 4.0), 2.0)}


@dataclass
class Params:
    metric: str = "qps"
    warm_s: float = 5.0  # the first level, under the threshold
    high_s: float = 20.0
    mid_s: float = 20.0
    window_s: int = 5  # scale-down stabilization window
    back_timeout_s: float = 60.0


@dataclass
class Result:
    timeline: list[tuple[float, int, int, int]] = field(
        default_factory=list
    )  # t, spec, total, running
    events: list[tuple[float, str]] = field(default_factory=list)
    requests: int = 0
    failed: list[str] = field(default_factory=list)
    crossed_at: float = 0.0
    stopped_at: float = 0.0
    decision_s: float | None = None
    serving_s: float | None = None
    back_to_min_s: float | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Platform:
    """``openeas up`` as a subprocess with its own data dir and eascmd profile; ``tree``: the
    checkout whose code it runs (default: the one on ``PYTHONPATH``, or installed)."""

    def __init__(self, tmp: Path, tree: Path | None = None) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("EAS_", "OPENEAS_"))},
            "HOME": str(tmp / "home"),
            "OPENEAS_DATA_DIR": str(tmp / "data"),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        if tree is not None:
            self.env["PYTHONPATH"] = str(tree)
        self.proc: subprocess.Popen[bytes] | None = None
        self.http: httpx.Client | None = None

    def start(self) -> None:
        log = (self.tmp / "up.log").open("ab")
        self.proc = subprocess.Popen(
            # A free gRPC port: several platforms (and other runs) side by side.
            [str(BIN / "openeas"), "up", "--port", str(self.port), "--grpc-port", "0"],
            cwd=self.tmp,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(self.log_tail())
            time.sleep(0.1)
        token = (self.tmp / "data" / "admin_token").read_text().strip()
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"})

    def log_tail(self) -> str:
        return (self.tmp / "up.log").read_text(errors="replace")[-3000:]

    def api(self, method: str, path: str, **kw: Any) -> Any:
        assert self.http is not None
        r = self.http.request(method, f"/api/v2/services{path}", **kw)
        r.raise_for_status()
        return r.json()

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def triton_service(name: str, instance: int, autoscaler: dict[str, Any]) -> dict[str, Any]:
    """The benchmarks' service: examples/models on CPU, autoscaled."""
    return {
        "name": name,
        "processor": "triton",
        "processor_params": [f"--model-repository={ROOT / 'examples' / 'models'}"],
        "metadata": {"instance": instance, "cpu": 1, "memory": 1000},
        "autoscaler": autoscaler,
    }


@contextmanager
def platform(tree: Path | None = None) -> Iterator[Platform]:
    with tempfile.TemporaryDirectory(prefix="openeas-autoscale-") as tmp:
        p = Platform(Path(tmp), tree)
        try:
            p.start()
            yield p
        finally:
            p.stop()


class Load:
    """Clients, each on its own keep-alive connection. Paced: ``set(rate)`` spreads
    ``rate`` requests/s over a fixed set of threads; closed-loop: ``set(n)`` runs n clients
    that send again as soon as answered. Counts requests and keeps every failure."""

    def __init__(self, port: int, token: str, result: Result, *, paced: bool) -> None:
        self.port = port
        self.token = token
        self.result = result
        self.paced = paced
        self.interval = 0.0  # seconds between one paced thread's requests
        self.lock = threading.Lock()
        self.threads: list[tuple[threading.Thread, threading.Event]] = []

    def set(self, level: float) -> None:
        if self.paced:
            self.interval = PACED_THREADS / level if level else 0.0
            n = PACED_THREADS if level else 0
        else:
            n = int(level)
        while len(self.threads) < n:
            stop = threading.Event()
            t = threading.Thread(target=self._client, args=(stop,), daemon=True)
            t.start()
            self.threads.append((t, stop))
        while len(self.threads) > n:
            t, stop = self.threads.pop()
            stop.set()
            t.join()

    def _client(self, stop: threading.Event) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        path = f"/api/predict/{SERVICE}/v2/models/add_sub/infer"
        headers = {"Authorization": self.token, "Content-Type": "application/json"}
        due = time.monotonic()
        while not stop.is_set():
            if self.paced:
                due = max(due + self.interval, time.monotonic() - 1.0)  # at most 1 s behind
                if stop.wait(max(0.0, due - time.monotonic())):
                    break
            try:
                conn.request("POST", path, body=INFER, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                ok = resp.status == 200
                why = f"HTTP {resp.status}: {body[:200]!r}"
            except (OSError, http.client.HTTPException) as e:
                ok, why = False, f"{type(e).__name__}: {e}"
                conn.close()
            with self.lock:
                self.result.requests += 1
                if not ok:
                    self.result.failed.append(f"{time.time():.3f} {why}")
        conn.close()


def _sample(p: Platform, result: Result, stop: threading.Event) -> None:
    last: tuple[int, int, int] | None = None
    while not stop.is_set():
        svc = p.api("GET", f"/local/{SERVICE}")
        now = (
            json.loads(svc["ServiceConfig"])["metadata"]["instance"],  # EAS's: a JSON string
            svc["TotalInstance"],
            svc["RunningInstance"],
        )
        if now != last:
            result.timeline.append((time.time(), *now))
            last = now
        stop.wait(0.1)


def run(params: Params, log: Any = print) -> Result:
    result = Result()
    (warm, high, mid), threshold = LEVELS[params.metric]
    unit = "requests/s" if params.metric == "qps" else "clients"
    with platform() as p:
        autoscaler = {
            "min": 1,
            "max": 4,
            "scaleStrategies": [{"metricName": params.metric, "threshold": threshold}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": params.window_s}},
        }
        created = p.api("POST", "", json=triton_service(SERVICE, 1, autoscaler))
        deadline = time.monotonic() + 120
        while p.api("GET", f"/local/{SERVICE}")["RunningInstance"] < 1:
            if time.monotonic() > deadline:
                raise RuntimeError(p.log_tail())
            time.sleep(0.1)
        log(f"service running; load: {warm:g} {unit} for {params.warm_s:g} s")
        stop_sampling = threading.Event()
        sampler = threading.Thread(target=_sample, args=(p, result, stop_sampling), daemon=True)
        sampler.start()
        load = Load(p.port, created["Token"], result, paced=params.metric == "qps")
        try:
            load.set(warm)
            time.sleep(params.warm_s)
            result.crossed_at = time.time()
            log(f"{high:g} {unit} for {params.high_s:g} s")
            load.set(high)
            time.sleep(params.high_s)
            log(f"{mid:g} {unit} for {params.mid_s:g} s")
            load.set(mid)
            time.sleep(params.mid_s)
            load.set(0)
            result.stopped_at = time.time()
            log("load stopped; waiting for min")
            deadline = time.monotonic() + params.back_timeout_s
            while time.monotonic() < deadline:
                if result.timeline and result.timeline[-1][1:] == (1, 1, 1):
                    break
                time.sleep(0.1)
        finally:
            load.set(0)
            stop_sampling.set()
            sampler.join()
        events = p.api("GET", f"/local/{SERVICE}/events")["Events"]
    result.events = [
        (datetime.fromisoformat(e["Time"]).timestamp(), e["Message"])
        for e in events
        if e["Reason"] == "Autoscaled"
    ]
    _measure(result)
    return result


def _measure(r: Result) -> None:
    up = [t for t, msg in r.events if t >= r.crossed_at and "1→" in msg]
    if up:
        r.decision_s = up[0] - r.crossed_at
    serving = [t for t, _, _, running in r.timeline if t >= r.crossed_at and running >= 2]
    if serving:
        r.serving_s = serving[0] - r.crossed_at
    back = [
        t for t, spec, total, running in r.timeline if t >= r.stopped_at and running == total == 1
    ]
    if back:
        r.back_to_min_s = back[0] - r.stopped_at


def report(r: Result, params: Params) -> str:
    def secs(v: float | None) -> str:
        return "never" if v is None else f"{v:.2f} s"

    t0 = r.timeline[0][0] if r.timeline else 0.0
    lines = ["replica timeline (s from first sample: asked / total / running):"]
    lines += [f"  {t - t0:7.2f}  {s} / {tot} / {run}" for t, s, tot, run in r.timeline]
    lines.append("autoscaler decisions:")
    lines += [f"  {t - t0:7.2f}  {msg}" for t, msg in r.events]
    lines += [
        f"load crossed the threshold at {r.crossed_at - t0:.2f} s "
        f"({LEVELS[params.metric][0][1]:g} {params.metric} level, threshold "
        f"{LEVELS[params.metric][1]:g} per replica)",
        f"time to decision:            {secs(r.decision_s)}",
        f"time to new replica serving: {secs(r.serving_s)}",
        f"requests: {r.requests}, failed: {len(r.failed)}",
        *(f"  {f}" for f in r.failed[:10]),
        f"time back to min after the load stopped (window {params.window_s} s): "
        f"{secs(r.back_to_min_s)}",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metric", choices=sorted(LEVELS), default="qps")
    ap.add_argument("--high-s", type=float, default=20.0)
    ap.add_argument("--mid-s", type=float, default=20.0)
    ap.add_argument("--window", type=int, default=5)
    args = ap.parse_args()
    params = Params(metric=args.metric, high_s=args.high_s, mid_s=args.mid_s, window_s=args.window)
    result = run(params)
    print(report(result, params))
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
