"""Benchmark of scale to zero: a service's first request at zero against Triton's own start.

Run by hand (``python bench/coldstart.py``); ``tests/e2e/test_coldstart.py`` runs the same
with fewer rounds. In one run, on the same model repository (``examples/models``: the python
backend on CPU):

- *baseline*: ``tritonserver`` started directly, from spawn to ``/v2/health/ready`` (polled
  every 20 ms);
- *cold start*: ``openeas up`` (as ``bench/autoscale.py`` runs it) with a service at zero
  (``autoscaler.min: 0``, a short grace period); one ``add_sub`` inference through the
  gateway, from sending it to its answer — the gateway holds it, wakes the service, the
  local runtime starts the replica, Triton loads, the request is forwarded;

the two alternated ``--rounds`` times (waiting for the service to go back to zero, and its
process to exit, before each round), so both see the same machine;
- *16 at once*: 16 clients send their first request together to the service at zero; all
  must be answered.

It prints each figure, the overhead (cold start − Triton's start, medians; target < 1 s)
and the ratio, and the ``ColdStart`` events' breakdowns.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.autoscale import BIN, INFER, ROOT, Platform, free_port, platform, triton_service
from processors.triton import binary

SERVICE = "coldstart_bench"
MODELS = ROOT / "examples" / "models"
GRACE_S = 2
CONCURRENT = 16
TARGET_OVERHEAD_S = 1.0


@dataclass
class Result:
    triton_s: list[float] = field(default_factory=list)  # spawn → ready, direct
    triton_first_s: list[float] = field(default_factory=list)  # spawn → first answer, direct
    cold_s: list[float] = field(default_factory=list)  # first request at zero → answer
    concurrent_s: list[float] = field(default_factory=list)  # each of the 16
    concurrent_failed: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # ColdStart messages

    @property
    def overhead_s(self) -> float:
        """Ours: the first request at zero against spawn → first answer, direct."""
        return statistics.median(self.cold_s) - statistics.median(self.triton_first_s)


def triton_start(tmp: Path) -> tuple[float, float]:
    """Seconds from spawning tritonserver on MODELS to its readiness, and to the answer of
    a first inference sent then (Triton's own lazy initialisation included)."""
    server = binary.locate()
    port, grpc, metrics = free_port(), free_port(), free_port()
    argv = [
        str(server.binary),
        f"--model-repository={MODELS}",
        f"--http-port={port}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1",
        *server.args,
    ]
    # The python backend's stub runs models with the Python it finds first on PATH.
    env = server.environ({**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    url = f"http://127.0.0.1:{port}/v2/health/ready"
    with (tmp / "tritonserver.log").open("ab") as log:
        started = time.monotonic()
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while time.monotonic() - started < 120:
            if process.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {process.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    ready = resp.status == 200
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                ready = False
            if ready:
                took = time.monotonic() - started
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("POST", "/v2/models/add_sub/infer", body=INFER)
                answer = conn.getresponse()
                answer.read()
                conn.close()
                if answer.status != 200:
                    raise RuntimeError(f"tritonserver answered {answer.status}")
                return took, time.monotonic() - started
            time.sleep(0.02)
        raise RuntimeError("tritonserver not ready after 120 s")
    finally:
        process.terminate()
        process.wait(30)


def infer(port: int, token: str) -> tuple[int, float, bytes]:
    """One add_sub inference through the gateway: (status, seconds, body head)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    path = f"/api/predict/{SERVICE}/v2/models/add_sub/infer"
    headers = {"Authorization": token, "Content-Type": "application/json"}
    started = time.monotonic()
    try:
        conn.request("POST", path, body=INFER, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, time.monotonic() - started, body[:200]
    finally:
        conn.close()


def at_zero(p: Platform) -> None:
    """Wait until the service is at zero with no replica left (its process exited)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        svc = p.api("GET", f"/local/{SERVICE}")
        if svc["Status"] == "ScaledToZero" and not svc.get("Replicas"):
            return
        time.sleep(0.1)
    raise RuntimeError(f"not back to zero: {p.log_tail()}")


def cold_events(p: Platform) -> list[str]:
    events = p.api("GET", f"/local/{SERVICE}/events")["Events"]
    return [e["Message"] for e in events if e["Reason"] == "ColdStart"]


def run(
    rounds: int = 3, concurrent: int = CONCURRENT, say: Callable[[str], None] = print
) -> Result:
    result = Result()
    with platform() as p, tempfile.TemporaryDirectory(prefix="openeas-coldstart-") as tmp:
        autoscaler = {
            "min": 0,
            "max": 2,
            "scaleStrategies": [{"metricName": "qps", "threshold": 1000}],
            "behavior": {"onZero": {"scaleDownGracePeriodSeconds": GRACE_S}},
        }
        created = p.api("POST", "", json=triton_service(SERVICE, 0, autoscaler))
        token = created["Token"]
        # Alternated, so that both see the same machine (other load comes and goes).
        for i in range(rounds):
            at_zero(p)
            ready, first = triton_start(Path(tmp))
            result.triton_s.append(ready)
            result.triton_first_s.append(first)
            status, took, body = infer(p.port, token)
            if status != 200:
                raise RuntimeError(f"first request at zero answered {status}: {body!r}")
            result.cold_s.append(took)
            say(
                f"round {i + 1}/{rounds}: tritonserver ready in {ready:.2f} s, answered in "
                f"{first:.2f} s; first request at zero answered in {took:.2f} s"
            )
        at_zero(p)
        say(f"{concurrent} first requests at once")
        barrier = threading.Barrier(concurrent)
        lock = threading.Lock()

        def client() -> None:
            barrier.wait()
            try:
                status, took, body = infer(p.port, token)
                why = f"HTTP {status}: {body!r}"
            except (OSError, http.client.HTTPException) as e:
                status, took, why = 0, 0.0, f"{type(e).__name__}: {e}"
            with lock:
                if status == 200:
                    result.concurrent_s.append(took)
                else:
                    result.concurrent_failed.append(why)

        threads = [threading.Thread(target=client) for _ in range(concurrent)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = time.monotonic() + 10
        while len(result.events) < rounds + 1 and time.monotonic() < deadline:
            result.events = cold_events(p)
            time.sleep(0.1)
    return result


def report(r: Result) -> str:
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s" if values else "-"

    def each(values: list[float]) -> str:
        return ", ".join(f"{v:.2f}" for v in values)

    ready, first = statistics.median(r.triton_s), statistics.median(r.triton_first_s)
    cold = statistics.median(r.cold_s)
    verdict = "met" if r.overhead_s < TARGET_OVERHEAD_S else "MISSED"
    lines = [
        f"tritonserver direct, spawn → ready:          median {med(r.triton_s)} "
        f"({each(r.triton_s)})",
        f"tritonserver direct, spawn → first answer:   median {med(r.triton_first_s)} "
        f"({each(r.triton_first_s)})",
        f"first request at zero → answer (gateway):    median {med(r.cold_s)} ({each(r.cold_s)})",
        f"overhead against the first answer: {r.overhead_s:+.2f} s (target < "
        f"{TARGET_OVERHEAD_S:g} s: {verdict}), ratio {cold / first:.2f}×; against ready: "
        f"{cold - ready:+.2f} s, ratio {cold / ready:.2f}×",
        f"{len(r.concurrent_s)} of {len(r.concurrent_s) + len(r.concurrent_failed)} concurrent "
        f"first requests answered; slowest {max(r.concurrent_s, default=0):.2f} s, "
        f"fastest {min(r.concurrent_s, default=0):.2f} s",
        *(f"  failed: {f}" for f in r.concurrent_failed[:5]),
        "ColdStart events:",
        *(f"  {e}" for e in r.events),
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrent", type=int, default=CONCURRENT)
    args = ap.parse_args()
    result = run(args.rounds, args.concurrent)
    print(report(result))
    return 1 if result.concurrent_failed else 0


if __name__ == "__main__":
    sys.exit(main())
