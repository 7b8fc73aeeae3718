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
  must be answered;
- *N services at once* (``--services N``): N services at zero (``add_sub`` alone, so N
  Tritons fit a small machine), one first request each, sent together: every one must be
  answered (a lost one is counted, with its answer).

It prints each figure, the overhead (cold start − Triton's start, medians) and the ratio,
the answer against the ``ColdStart`` events' own "Triton load" (target: at most
``TARGET_OVER_LOAD_S`` more), and the events' breakdowns. ``--base DIR`` runs a second
``openeas up`` from another checkout beside this one, its rounds alternated with this one's
and Triton's, for before/after figures in one run. (``bench/deploy.py`` measures ``eascmd
create`` → Running against Triton's own start the same way.)
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bench.autoscale import BIN, INFER, ROOT, Platform, free_port, platform, triton_service
from bench.deploy import cpu_seconds
from controlplane.runtime.local import START_MARKER, log_folder
from processors.triton import binary

SERVICE = "coldstart_bench"
MODELS = ROOT / "examples" / "models"
GRACE_S = 2
CONCURRENT = 16
TARGET_OVERHEAD_S = 1.0
TARGET_OVER_LOAD_S = 0.5  # first answer at zero − the ColdStart event's "Triton load"
AUTOSCALER = {
    "min": 0,
    "max": 2,
    "scaleStrategies": [{"metricName": "qps", "threshold": 1000}],
    "behavior": {"onZero": {"scaleDownGracePeriodSeconds": GRACE_S}},
}


@dataclass
class Result:
    """One platform's figures (``triton_*``: the direct baseline, shared by all)."""

    triton_s: list[float] = field(default_factory=list)  # spawn → ready, direct
    triton_first_s: list[float] = field(default_factory=list)  # spawn → first answer, direct
    # spawn → first answer − triton_own(), direct: what Triton adds to its own start
    direct_over_own_s: list[float] = field(default_factory=list)
    cold_s: list[float] = field(default_factory=list)  # first request at zero → answer
    # first answer at zero − triton_own() of the replica's start
    cold_over_own_s: list[float] = field(default_factory=list)
    concurrent_s: list[float] = field(default_factory=list)  # each of the 16
    concurrent_failed: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # ColdStart messages
    woken_s: list[float] = field(default_factory=list)  # each of N services' first answer
    woken_failed: list[str] = field(default_factory=list)  # N services: each one lost
    woken_cpu_s: float | None = None  # `openeas up`'s own CPU (not its replicas') meanwhile

    @property
    def overhead_s(self) -> float:
        """Ours: the first request at zero against spawn → first answer, direct."""
        return statistics.median(self.cold_s) - statistics.median(self.triton_first_s)

    @property
    def added_s(self) -> float | None:
        """What the platform adds to Triton's own start, as Triton's logs time it: the
        median of (first answer at zero − the replica's Triton own start), less the same
        for the direct start ((spawn → first answer) − its own start): the process start,
        the wake-up, readiness noticed, the held request released. Triton's load time,
        which varies by seconds on a busy machine, is out of it on both sides."""
        if not self.cold_over_own_s or not self.direct_over_own_s:
            return None
        return statistics.median(self.cold_over_own_s) - statistics.median(self.direct_over_own_s)

    @property
    def over_load_s(self) -> float | None:
        """The first answer at zero against the ColdStart events' "Triton load" (medians;
        the events of the single service's rounds only)."""
        loads = [triton_load(e) for e in self.events[: len(self.cold_s)]]
        found = [x for x in loads if x is not None]
        if not found or not self.cold_s:
            return None
        return statistics.median(self.cold_s) - statistics.median(found)


def triton_load(event: str) -> float | None:
    """The "Triton load" seconds of a ColdStart event's message."""
    m = re.search(r"Triton load ([0-9.]+) s", event)
    return float(m.group(1)) if m else None


# A line of Triton's log: severity, MMDD, time of day (UTC, microseconds), thread, source.
TRITON_LINE = re.compile(rb"^[IWEF](\d{4}) (\d\d):(\d\d):(\d\d\.\d+) ", re.M)
HTTP_STARTED = b"Started HTTPService"


def triton_own(log: bytes) -> float | None:
    """Triton's own start as its log tells it: its first line to "Started HTTPService" (its
    models are loaded then), in seconds; None without both. Whoever started it (the bench,
    a replica's processor) and however loaded the machine, this is Triton's part."""
    at = log.find(HTTP_STARTED)
    first = TRITON_LINE.search(log)
    started = [m for m in TRITON_LINE.finditer(log, 0, at)] if at >= 0 else []
    if first is None or not started:
        return None

    def seconds(m: re.Match[bytes]) -> float:
        day, h, mi, sec = m.groups()
        return int(day) % 100 * 86400 + int(h) * 3600 + int(mi) * 60 + float(sec)

    return seconds(started[-1]) - seconds(first)


def replica_own(p: Platform, service: str = SERVICE) -> float | None:
    """:func:`triton_own` of the last start of the service's newest replica."""
    folder = log_folder(p.tmp / "data", service)
    logs = [f for f in folder.glob("*.log") if f.stem.isdigit()]
    if not logs:
        return None
    text = max(logs, key=lambda f: int(f.stem)).read_bytes()
    return triton_own(text[text.rfind(START_MARKER.encode()) :])


def triton_start(tmp: Path) -> tuple[float, float, float | None]:
    """Seconds from spawning tritonserver on MODELS to its readiness, and to the answer of
    a first inference sent then (Triton's own lazy initialisation included); and
    :func:`triton_own` of that start."""
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
    log_path = tmp / "tritonserver.log"
    with log_path.open("wb") as log:
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
                first = time.monotonic() - started
                return took, first, triton_own(log_path.read_bytes())
            time.sleep(0.02)
        raise RuntimeError("tritonserver not ready after 120 s")
    finally:
        process.terminate()
        process.wait(30)


def infer(port: int, token: str, service: str = SERVICE) -> tuple[int, float, bytes]:
    """One add_sub inference through the gateway: (status, seconds, body head)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    path = f"/api/predict/{service}/v2/models/add_sub/infer"
    headers = {"Authorization": token, "Content-Type": "application/json"}
    started = time.monotonic()
    try:
        conn.request("POST", path, body=INFER, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, time.monotonic() - started, body[:200]
    finally:
        conn.close()


def at_zero(p: Platform, service: str = SERVICE) -> None:
    """Wait until the service is at zero with no replica left (its process exited)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        svc = p.api("GET", f"/local/{service}")
        if svc["Status"] == "ScaledToZero" and not svc.get("Replicas"):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{service} not back to zero: {p.log_tail()}")


def cold_events(p: Platform, service: str = SERVICE) -> list[str]:
    events = p.api("GET", f"/local/{service}/events")["Events"]
    return [e["Message"] for e in events if e["Reason"] == "ColdStart"]


def together(calls: list[Callable[[], tuple[int, float, bytes]]]) -> tuple[list[float], list[str]]:
    """Each call in its own thread, released at once: the seconds of those answered 200,
    and why each other one was lost."""
    barrier = threading.Barrier(len(calls))
    lock = threading.Lock()
    answered: list[float] = []
    lost: list[str] = []

    def client(call: Callable[[], tuple[int, float, bytes]]) -> None:
        barrier.wait()
        try:
            status, took, body = call()
            why = f"HTTP {status}: {body!r}"
        except (OSError, http.client.HTTPException) as e:
            status, took, why = 0, 0.0, f"{type(e).__name__}: {e}"
        with lock:
            if status == 200:
                answered.append(took)
            else:
                lost.append(why)

    threads = [threading.Thread(target=client, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answered, lost


def one_model(tmp: Path) -> Path:
    """A model repository holding ``add_sub`` alone (one backend stub per Triton)."""
    repo = tmp / "add_sub_only"
    if not repo.exists():
        shutil.copytree(MODELS / "add_sub", repo / "add_sub")
    return repo


def wake_many(p: Platform, n: int, repo: Path, r: Result) -> None:
    """N services at zero, one first request each, all sent together; then deleted."""
    names = [f"woken_{i}" for i in range(n)]
    tokens = {}
    for name in names:
        spec = triton_service(name, 0, AUTOSCALER)
        spec["processor_params"] = [f"--model-repository={repo}"]
        tokens[name] = p.api("POST", "", json=spec)["Token"]
    for name in names:
        at_zero(p, name)
    calls = [lambda name=name: infer(p.port, tokens[name], name) for name in names]
    assert p.proc is not None
    cpu = cpu_seconds(p.proc.pid, descendants=False)
    r.woken_s, r.woken_failed = together(calls)
    r.woken_cpu_s = cpu_seconds(p.proc.pid, descendants=False) - cpu
    for name in names:
        p.api("DELETE", f"/local/{name}")
    assert p.http is not None
    deadline = time.monotonic() + 120  # gone: their replicas stopped, rows deleted
    while time.monotonic() < deadline and any(
        p.http.get(f"/api/v2/services/local/{name}").status_code != 404 for name in names
    ):
        time.sleep(0.2)


def run(
    rounds: int = 3,
    concurrent: int = CONCURRENT,
    say: Callable[[str], None] = print,
    *,
    services: int = 0,
    base: Path | None = None,
) -> dict[str, Result]:
    """The figures of this checkout (``"this"``) and, with ``base``, of that one."""
    trees: dict[str, Path | None] = {"this": ROOT} | ({"base": base} if base else {})
    results = {name: Result() for name in trees}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="openeas-coldstart-")))
        platforms = {name: stack.enter_context(platform(tree)) for name, tree in trees.items()}
        tokens = {
            name: p.api("POST", "", json=triton_service(SERVICE, 0, AUTOSCALER))["Token"]
            for name, p in platforms.items()
        }
        # Alternated, so that all see the same machine (other load comes and goes).
        for i in range(rounds):
            ready, first, own = triton_start(tmp)
            line = (
                f"round {i + 1}/{rounds}: tritonserver ready {ready:.2f} s, answered {first:.2f} s"
            )
            for name, p in platforms.items():
                at_zero(p)
                r = results[name]
                r.triton_s.append(ready)
                r.triton_first_s.append(first)
                if own is not None:
                    r.direct_over_own_s.append(first - own)
                status, took, body = infer(p.port, tokens[name])
                if status != 200:
                    raise RuntimeError(f"{name}: first request at zero answered {status}: {body!r}")
                r.cold_s.append(took)
                replica = replica_own(p)
                if replica is not None:
                    r.cold_over_own_s.append(took - replica)
                line += f"; {name}: first request at zero answered in {took:.2f} s"
            say(line)
        for name, p in platforms.items():
            at_zero(p)
            say(f"{name}: {concurrent} first requests at once")
            r = results[name]
            r.concurrent_s, r.concurrent_failed = together(
                [lambda p=p, token=tokens[name]: infer(p.port, token)] * concurrent
            )
            deadline = time.monotonic() + 10
            while len(r.events) < rounds + 1 and time.monotonic() < deadline:
                r.events = cold_events(p)
                time.sleep(0.1)
        for name, p in platforms.items():
            if services:
                say(f"{name}: {services} services at zero woken at once")
                wake_many(p, services, one_model(tmp), results[name])
    return results


def report(r: Result, name: str = "this") -> str:
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s" if values else "-"

    def each(values: list[float]) -> str:
        return ", ".join(f"{v:.2f}" for v in values)

    ready, first = statistics.median(r.triton_s), statistics.median(r.triton_first_s)
    cold = statistics.median(r.cold_s)
    verdict = "met" if r.overhead_s < TARGET_OVERHEAD_S else "MISSED"
    over = r.over_load_s
    over_line = "first answer against the ColdStart events' Triton load: " + (
        f"{over:+.2f} s (target ≤ {TARGET_OVER_LOAD_S:g} s: "
        f"{'met' if over <= TARGET_OVER_LOAD_S else 'MISSED'})"
        if over is not None
        else "no event"
    )
    lines = [
        f"[{name}]",
        f"tritonserver direct, spawn → ready:          median {med(r.triton_s)} "
        f"({each(r.triton_s)})",
        f"tritonserver direct, spawn → first answer:   median {med(r.triton_first_s)} "
        f"({each(r.triton_first_s)})",
        f"first request at zero → answer (gateway):    median {med(r.cold_s)} ({each(r.cold_s)})",
        f"overhead against the first answer: {r.overhead_s:+.2f} s (target < "
        f"{TARGET_OVERHEAD_S:g} s: {verdict}), ratio {cold / first:.2f}×; against ready: "
        f"{cold - ready:+.2f} s, ratio {cold / ready:.2f}×",
        over_line,
        "added to Triton's own start (its log: first line → HTTP service started), "
        + (
            f"against the direct start's: {r.added_s:+.2f} s (first answer − own: "
            f"{each(r.cold_over_own_s)}; direct: {each(r.direct_over_own_s)})"
            if r.added_s is not None
            else "-"
        ),
        f"{len(r.concurrent_s)} of {len(r.concurrent_s) + len(r.concurrent_failed)} concurrent "
        f"first requests answered; slowest {max(r.concurrent_s, default=0):.2f} s, "
        f"fastest {min(r.concurrent_s, default=0):.2f} s",
        *(f"  failed: {f}" for f in r.concurrent_failed[:5]),
    ]
    if r.woken_s or r.woken_failed:
        n = len(r.woken_s) + len(r.woken_failed)
        lines += [
            f"{n} services at zero woken at once: {len(r.woken_s)} answered, "
            f"{len(r.woken_failed)} lost; slowest {max(r.woken_s, default=0):.2f} s, "
            f"median {med(r.woken_s)}; the platform's own CPU meanwhile "
            f"{r.woken_cpu_s or 0:.2f} s (its replicas' not counted)",
            *(f"  lost: {f}" for f in r.woken_failed[:5]),
        ]
    lines += ["ColdStart events:", *(f"  {e}" for e in r.events)]
    return "\n".join(lines)


def compare(this: Result, base: Result) -> str:
    """This checkout against the base, same run: medians and ratios (this / base)."""

    def row(label: str, a: list[float], b: list[float]) -> str:
        if not a or not b:
            return f"{label}: -"
        ma, mb = statistics.median(a), statistics.median(b)
        return f"{label}: this {ma:.2f} s, base {mb:.2f} s, ratio {ma / mb:.2f}×"

    lines = [
        row("first request at zero → answer", this.cold_s, base.cold_s),
        row(
            "first request at zero → answer, less Triton's own start",
            this.cold_over_own_s,
            base.cold_over_own_s,
        ),
        f"overhead against Triton's first answer: this {this.overhead_s:+.2f} s, "
        f"base {base.overhead_s:+.2f} s",
        row(
            "16 at once, slowest",
            [max(this.concurrent_s, default=0)],
            [max(base.concurrent_s, default=0)],
        ),
    ]
    if this.woken_cpu_s and base.woken_cpu_s:
        lines.append(
            f"N services woken at once, the platform's own CPU: this {this.woken_cpu_s:.2f} s, "
            f"base {base.woken_cpu_s:.2f} s, ratio {this.woken_cpu_s / base.woken_cpu_s:.2f}×"
        )
    if this.woken_s and base.woken_s:
        lines.append(
            row("N services woken at once, slowest", [max(this.woken_s)], [max(base.woken_s)])
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrent", type=int, default=CONCURRENT)
    ap.add_argument("--services", type=int, default=0, help="N services woken at once (0: not run)")
    ap.add_argument("--base", type=Path, help="another checkout, measured beside this one")
    args = ap.parse_args()
    results = run(args.rounds, args.concurrent, services=args.services, base=args.base)
    for name, result in results.items():
        print(report(result, name))
    if "base" in results:
        print("[this against base, same run]")
        print(compare(results["this"], results["base"]))
    lost = any(r.concurrent_failed or r.woken_failed for r in results.values())
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
