"""Benchmark of the gateway against direct Triton and nginx, in one run.

Run by hand (``python bench/gateway.py``; needs ``nginx`` and ``wrk`` from Debian) to get the
figures quoted in the gateway's closing note. It starts, each as its own process:

- ``tritonserver`` on ``examples/models`` (python backend, CPU);
- ``nginx`` as a reverse proxy with the same route and token check as the gateway
  (``map`` on ``Authorization``, both the bare and ``Bearer`` forms; upstream keep-alive),
  sending Triton the ``X-Forwarded-For``/``-Proto``/``-Host`` fields the gateway sends, so
  Triton parses the same request behind both;
- the gateway (``gateway.app.start_gateway`` with a static route table), which also holds a
  service group of two members in front of the same Triton (``group``: the same gateway
  reached at ``/api/predict/<group>``, each request picking a member by weight).

The server side (Triton and whichever proxy is measured) is pinned to one core
(``--server-cpu``), the load generators to another (``--client-cpu``), so a proxy's cost
shows as throughput Triton loses, as it would on a busy node. For both models (``add_sub``:
4 floats; ``inception_graphdef``: a 1 MB ``[1,299,299,3]`` FP32 input) it prints:

1. sequential latency p50/p95/p99 with the official ``tritonclient.http`` client (binary
   tensors), and the p50 each proxy adds to direct Triton: one client per target, its calls
   interleaved call by call with the others' (in a new shuffled order each time), so a slow
   spell of the machine falls on every target alike; beside each added p50, its range over
   ``--repeat`` consecutive slices of the calls. ``up`` has a Triton of its own (its replica,
   row ``up:replica``, called directly): under ``up``, the p50 it adds over that replica is
   the platform's own, where its added p50 over ``direct`` holds the two Tritons' difference
   too; the same nginx also runs in front of that replica (row ``nginx@up``), and up's added
   p50 over it is also said as a ratio to nginx@up's;
2. throughput with ``wrk`` (a Lua script POSTs the same binary infer body) at 1, 8 and 64
   connections, as requests/s and as ratios to direct Triton and to nginx; ``up`` also to
   ``nginx@up``, round by round (``× nginx on its own replica``): a ratio on one Triton,
   where its ratio to ``nginx`` holds the two Tritons' difference;
3. under each throughput line, the CPU (user + system, from ``/proc``) each proxy's processes
   and Triton spent per request, the least of the rounds: a steadier figure than throughput
   when other work shares the machine, and it shows whether a proxy costs Triton CPU too
   (for ``up``: the platform's own process, gateway and control plane, and its replica);
   beside each proxy's, the user part of it (in front of Triton, where proxies differ);
4. under that, wrk's p99/p99.9/max latency per row, each the median over the rounds: where a
   pause of a whole proxy shows. With ``--new-connections`` every call comes on a connection
   of its own (``Connection: close``), as from a client without keep-alive: closed
   connections left garbage in reference cycles, and the collector's full passes it brought
   were such pauses (``startup/heap.py``, ``HttpConnection.connection_lost``).

The ``floor`` target (``--targets …,floor``) is a blind TCP forwarder written on the
gateway's event loop (uvloop), pinned like the proxies: bytes pass to Triton as sent, nothing
parsed, no token checked — the least any Python proxy here costs, for reading the gateway's
figures against nginx's.

The ``group`` row is also compared with the ``gateway`` row (the direct service through the
same gateway): the cost of the group endpoint (member choice) is that ratio; the target is
at most 5 %.

The ``signed`` row is the same gateway and service called as ``eas_prediction``'s
``PredictClient`` calls by default: ``Authorization: EAS <signature>`` (HMAC-SHA1 keyed by
the token over method, Content-MD5, Content-Type, Date and path) with ``Date`` and
``Content-MD5``, which the gateway checks in full on every call. Its p50 is compared with
the ``gateway`` row's (the raw token), call by call in the same run; the target is at most
+0.05 ms. Its probe signs each call before timing it (a client's cost, not the gateway's);
wrk sends one signature per run (its Date taken when the run starts: a run is shorter than
the 15 minutes a Date is good for), and the gateway checks it on every call all the same.
The ``dressed`` row sends the token with the headers a signed call adds beside it (``Date``,
``Content-MD5``, ``Content-Type``): ``signed`` over ``dressed`` is the gateway's check
alone; ``dressed`` over ``gateway`` is what those header bytes cost the client and Triton.

The throughput phase runs ``--repeat`` interleaved rounds (direct, nginx, gateway, then nginx,
gateway, …, direct: the order turns by one each round) and reports the median, because other
work on a shared machine moves single runs by ±20 %; each throughput point also prints
every proxy's ratio to nginx round by round (the median and range of the per-round ratios),
which a drift of the machine over the run does not skew.
Every request of every phase must succeed (HTTP 200); a run with failures says so, names
the row and round of each, and keeps every process's log (``openeas up``'s and its
replicas' too) in a directory it prints, with ``runs.log``: when each wrk run began and
ended (warm-ups too), to match a crash in a replica's log with what was running. A replica
of ``up`` that started again during the run (its logs are then kept too) is named with the
first line of its crash: Triton's Python backend has been seen to
abort under this load (``boost::interprocess::lock_exception``), and the calls its restart
refuses are its failure, not the gateway's; ``nginx@up`` follows such a replica to the port it
starts on again (its configuration rewritten, its master told with SIGHUP).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any

# bench/builds.py: a --base checkout's gateway compiled like this one's
from builds import announce

# bench/deploy.py: `openeas up` and eascmd from a checkout, Triton as the baseline
from deploy import Meter, Platform, replica_restarts, tritonserver

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "examples" / "models"
SERVICE = "bench"
GROUP = "bench_group"
SIGNED = {"signed"}  # targets called with EAS's signature instead of the token
# Called with the token and, beside it, the headers a signed call sends (Date, Content-MD5,
# Content-Type): what those bytes cost the client and Triton, apart from the gateway's check.
DRESSED = {"dressed"}

WRK_LUA = r"""
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
local body = f:read("*all")
f:close()
wrk.method = "POST"
wrk.body = body
if os.getenv("BENCH_CLOSE") == "1" then wrk.headers["Connection"] = "close" end
local date = os.getenv("BENCH_DATE")
if date ~= nil and date ~= "" then
  wrk.headers["Date"] = date
  wrk.headers["Content-MD5"] = os.getenv("BENCH_MD5")
end
wrk.path = os.getenv("BENCH_PATH")
wrk.headers["Inference-Header-Content-Length"] = os.getenv("BENCH_HLEN")
wrk.headers["Content-Type"] = "application/octet-stream"
local token = os.getenv("BENCH_TOKEN")
if token ~= nil and token ~= "" then wrk.headers["Authorization"] = token end
local bad = 0
response = function(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format(
    "BENCH requests=%d duration_us=%d non200=%d sockerr=%d p50_us=%d tail_us=%d,%d,%d\n",
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
"""

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/nginx-body;
  proxy_temp_path {tmp}/nginx-proxy;
  fastcgi_temp_path {tmp}/nginx-fastcgi;
  uwsgi_temp_path {tmp}/nginx-uwsgi;
  scgi_temp_path {tmp}/nginx-scgi;
  client_max_body_size 64m;
  client_body_buffer_size 2m;
  keepalive_requests 100000;
  map $http_authorization $openeas_token_ok {{
    default 0;
    "{token}" 1;
    "Bearer {token}" 1;
  }}
  upstream triton {{
    server 127.0.0.1:{triton_port};
    keepalive 128;
    keepalive_requests 100000;
  }}
  server {{
    listen 127.0.0.1:{port};
    location /api/predict/{service}/ {{
      if ($openeas_token_ok = 0) {{ return 401; }}
      proxy_pass http://triton/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $http_host;
      proxy_request_buffering off;
      proxy_buffers 16 64k;
      proxy_buffer_size 64k;
      proxy_busy_buffers_size 128k;
    }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError(f"{url} not up after {timeout:.0f} s")


@contextmanager
def process(
    argv: list[str], log: Path, *, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def write_nginx_conf(home: Path, triton_port: int, port: int, token: str) -> None:
    """NGINX_CONF in ``home`` (its pid and temporary files go there too): on ``port`` in
    front of the Triton on ``triton_port``."""
    home.mkdir(exist_ok=True)
    conf = NGINX_CONF.format(
        tmp=home, token=token, triton_port=triton_port, port=port, service=SERVICE
    )
    (home / "nginx.conf").write_text(conf)


def nginx_argv(home: Path, cpu: int) -> list[str]:
    """nginx, pinned to ``cpu``, on the configuration in ``home``."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    return pinned(cpu, [nginx, "-c", str(home / "nginx.conf"), "-p", str(home)])


@dataclass
class Front:
    """nginx in front of a platform's own replica (row ``nginx@<platform>``), following it
    to the port it starts on again after a crash (the local runtime draws one per start)."""

    platform: str
    home: Path
    port: int
    upstream: int  # the replica's port its configuration names
    pid: int = 0

    def follow(self, replica_port: int, token: str) -> None:
        if replica_port != self.upstream:
            self.upstream = replica_port
            write_nginx_conf(self.home, replica_port, self.port, token)
            os.kill(self.pid, signal.SIGHUP)  # its master re-reads it; new workers serve


def pinned(cpu: int, argv: list[str]) -> list[str]:
    return pinned_cpus(str(cpu), argv)


def pinned_cpus(cpus: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpus, *argv]


# --- workloads -------------------------------------------------------------------------


@dataclass
class Workload:
    model: str
    body: Path
    header_len: int
    sequential: int  # requests for the latency phase


def make_bodies(tmp: Path, sequential_small: int, sequential_large: int) -> list[Workload]:
    import numpy as np

    out = []
    a = np.arange(4, dtype=np.float32)
    b = np.ones(4, dtype=np.float32)
    image = np.random.default_rng(0).random((1, 299, 299, 3), dtype=np.float32)
    cases = [
        ("add_sub", [("INPUT0", a), ("INPUT1", b)], ["OUTPUT0", "OUTPUT1"], sequential_small),
        (
            "inception_graphdef",
            [("input", image)],
            ["InceptionV3/Predictions/Softmax"],
            sequential_large,
        ),
    ]
    for model, inputs, outputs, n in cases:
        header = {
            "inputs": [
                {
                    "name": name,
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
                for name, x in inputs
            ],
            "outputs": [{"name": o, "parameters": {"binary_data": True}} for o in outputs],
        }
        head = json.dumps(header).encode()
        path = tmp / f"{model}.body"
        path.write_bytes(head + b"".join(x.tobytes() for _, x in inputs))
        out.append(Workload(model, path, len(head), n))
    return out


def eas_signed(token: str, path: str, content_md5: str) -> dict[str, str]:
    """The headers ``eas_prediction.PredictClient`` signs a call with (its default mode):
    ``path`` is the request path, ``content_md5`` the hex MD5 of the body."""
    content_type = "application/octet-stream"  # the SDK's default
    date = formatdate(usegmt=True)
    to_sign = f"POST\n{content_md5}\n{content_type}\n{date}\n{path}"
    mac = hmac.new(token.encode(), to_sign.encode(), hashlib.sha1).digest()
    return {
        "Authorization": "EAS " + base64.b64encode(mac).decode(),
        "Date": date,
        "Content-MD5": content_md5,
        "Content-Type": content_type,
    }


@functools.cache
def body_md5(body: Path) -> str:
    return hashlib.md5(body.read_bytes()).hexdigest()


class LatencyProbe:
    """One target's ``tritonclient.http`` client (binary tensors), its connection kept, and
    the inputs of a workload: :meth:`call` times one infer (ms). With ``signed_path`` (the
    request path), each call is signed as ``eas_prediction`` signs, before it is timed."""

    def __init__(
        self,
        url: str,
        workload: Workload,
        token: str | None,
        signed_path: str | None = None,
        dressed: bool = False,
    ) -> None:
        import numpy as np
        import tritonclient.http as httpclient

        self.model = workload.model
        self.client = httpclient.InferenceServerClient(url=url)
        self.headers = {"Authorization": token} if token else None
        if workload.model == "add_sub":
            self.inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
            self.inputs[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
            self.inputs[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
        else:
            image = np.random.default_rng(0).random((1, 299, 299, 3), dtype=np.float32)
            self.inputs = [httpclient.InferInput("input", [1, 299, 299, 3], "FP32")]
            self.inputs[0].set_data_from_numpy(image)
        self.signing: tuple[str, str, str] | None = None
        if signed_path is not None and token:
            # The very body infer() sends: the inputs do not change between calls.
            body, _ = httpclient.InferenceServerClient.generate_request_body(self.inputs)
            self.signing = (token, signed_path, hashlib.md5(body).hexdigest())
        self.dressed = dressed

    def next_headers(self) -> dict[str, str] | None:
        """The next call's headers: made before it is timed (a client's cost)."""
        if self.signing is None:
            return self.headers
        made = eas_signed(*self.signing)  # a fresh dict: tritonclient adds to it
        if self.dressed:
            made["Authorization"] = self.signing[0]
        return made

    def call(self) -> float:
        headers = self.next_headers()
        t = time.perf_counter()
        self.client.infer(self.model, self.inputs, headers=headers)
        return (time.perf_counter() - t) * 1000.0

    def close(self) -> None:
        self.client.close()


def call_orders(names: list[str], n: int, seed: int = 0) -> Iterator[list[str]]:
    """``n`` orders of ``names``, shuffled each (seeded: runs compare): no target always
    follows the same other. A call right after one to the same Triton finds it warm, one
    after the other Triton's (``up``'s replica) cold; a fixed order gave ``group`` (after
    ``gateway``) a p50 below direct Triton's and ``up`` (after another Triton's call) 0.5 ms
    more than it adds."""
    rng = random.Random(seed)
    for _ in range(n):
        order = list(names)
        rng.shuffle(order)
        yield order


def sequential_latency(
    probes: dict[str, LatencyProbe], n: int, warmup: int = 20
) -> dict[str, list[float]]:
    """``n`` timed calls per target (after ``warmup`` each), interleaved call by call in a
    new order each time (:func:`call_orders`): a drift of the machine's speed, or a slow
    spell, falls on every target alike instead of on whichever target's block it hits."""
    samples: dict[str, list[float]] = {name: [] for name in probes}
    for i, order in enumerate(call_orders(list(probes), warmup + n)):
        for name in order:
            ms = probes[name].call()
            if i >= warmup:
                samples[name].append(ms)
    return samples


def added_p50_range(samples: list[float], baseline: list[float], parts: int) -> str:
    """The spread of the added p50 over ``parts`` consecutive slices of the calls (each
    slice's p50 less the baseline's in the same slice: direct Triton, or ``up``'s own
    replica): how far the figure can be trusted."""
    k = len(samples) // parts
    if k < 10:
        return ""
    added = sorted(
        statistics.median(samples[i * k : (i + 1) * k])
        - statistics.median(baseline[i * k : (i + 1) * k])
        for i in range(parts)
    )
    return f" [{added[0]:+.3f}..{added[-1]:+.3f}]"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def paired_ratio(runs: list[WrkResult], against: list[WrkResult]) -> str:
    """The median of the ratios of runs in the same round (and their range): rounds are
    interleaved, so a drift of the machine's speed moves both sides of each ratio alike."""
    ratios = sorted(a.rps / b.rps for a, b in zip(runs, against, strict=True) if b.rps > 0)
    if not ratios:
        return "n/a"
    return f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def tail(runs: list[WrkResult]) -> str:
    """wrk's p99, p99.9 and max latency (ms), each the median over the rounds: a pause of the
    whole proxy (a full garbage collection, say) shows there, not in the median latency."""
    return "/".join(f"{statistics.median(r.tail_ms[i] for r in runs):.1f}" for i in range(3))


def keep_logs(tmp: Path) -> Path:
    """Every process's log from the run's temporary directory (``openeas up``'s and its
    replicas' included), copied out before the directory goes: what explains a failed row."""
    kept = Path(tempfile.mkdtemp(prefix="openeas-bench-logs-"))
    for log in tmp.rglob("*.log"):
        dest = kept / log.relative_to(tmp)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(log, dest)
    return kept


def round_order(targets: list[str], round_no: int) -> list[str]:
    """The order of the targets in round ``round_no``: rotated by one each round, so no
    target is always measured right after the same other (a warm-up or a slow-down that
    one target leaves behind would otherwise always land on the next)."""
    k = round_no % len(targets) if targets else 0
    return targets[k:] + targets[:k]


def pct(samples: list[float], p: float) -> float:
    return statistics.quantiles(samples, n=1000, method="inclusive")[int(p * 10) - 1]


@dataclass
class WrkResult:
    rps: float
    non200: int
    sockerr: int
    requests: int
    p50_ms: float  # wrk's median latency
    tail_ms: tuple[float, ...] = (0.0, 0.0, 0.0)  # wrk's p99, p99.9 and max


def run_wrk(
    cpu: int,
    base: str,
    path: str,
    workload: Workload,
    token: str | None,
    connections: int,
    duration: float,
    lua: Path,
    new_connections: bool = False,
    signed: bool = False,
    dressed: bool = False,
) -> WrkResult:
    """``new_connections``: each call on a connection of its own (``Connection: close``).
    ``signed``: with EAS's signature made with ``token`` (:func:`eas_signed`) instead;
    ``dressed``: with the token, and the other headers such a signature comes with."""
    env = dict(os.environ)
    env.update(
        BENCH_BODY=str(workload.body),
        BENCH_HLEN=str(workload.header_len),
        BENCH_PATH=path,
        BENCH_TOKEN=token or "",
        BENCH_CLOSE="1" if new_connections else "0",
    )
    if (signed or dressed) and token:
        made = eas_signed(token, path, body_md5(workload.body))
        env.update(
            BENCH_TOKEN=made["Authorization"] if signed else token,
            BENCH_DATE=made["Date"],
            BENCH_MD5=made["Content-MD5"],
        )
    argv = pinned(
        cpu,
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{duration:g}s",
            "--timeout",
            "30s",
            "-s",
            str(lua),
            base,
        ],
    )
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    m = re.search(
        r"BENCH requests=(\d+) duration_us=(\d+) non200=(\d+) sockerr=(\d+) p50_us=(\d+) "
        r"tail_us=(\d+),(\d+),(\d+)",
        out,
    )
    if m is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    requests, us, non200, sockerr, p50_us, *tail_us = (int(g) for g in m.groups())
    tail_ms = tuple(t / 1000.0 for t in tail_us)
    return WrkResult(requests / (us / 1e6), non200, sockerr, requests, p50_us / 1000.0, tail_ms)


def clock() -> str:
    """Wall-clock time as Triton's log lines give it (the replicas' logs are read beside)."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"


def record_run(record: Path, started: str, what: str) -> None:
    """A line in ``record``: from ``started`` (:func:`clock`) until now, ``what`` ran."""
    with record.open("a") as out:
        out.write(f"{started} - {clock()} {what}\n")


def recorded_wrk(record: Path, label: str, *args: Any) -> WrkResult:
    """:func:`run_wrk`, with a line in ``record`` of when it ran, what and how it went: a
    replica's crash in its log is matched to the run it fell in (or between)."""
    started = clock()
    r = run_wrk(*args)
    said = f"{r.requests} requests, {r.non200} non-200, {r.sockerr} socket errors"
    record_run(record, started, f"{label}: {said}")
    return r


# --- the gateway under test, as its own process -----------------------------------------


def serve_gateway(port: int, upstream: str, token: str, workers: int = 1) -> None:
    """``--serve-gateway``: a gateway with a static table: two services on the same replica,
    members of one group (the first is also called directly)."""
    sys.path.insert(0, str(ROOT))
    from contract.wire import GroupRoute, Route, RouteTable, token_digest
    from gateway.app import start_gateway
    from gateway.route_source import StaticRouteSource
    from gateway.settings import GatewaySettings

    digest = token_digest(token)
    table = RouteTable(
        version=1,
        routes=[
            Route(
                service=name,
                token_sha256=digest,
                token=token,  # the key of signed calls, as the control plane sends it
                endpoints=[upstream],
                timeout_ms=60_000,
                status="Running",
                group=GROUP,
                weight=weight,
                grouping=True,
            )
            for name, weight in ((SERVICE, 100), (SERVICE + "_b", 300))
        ],
        groups=[
            GroupRoute(group=GROUP, token_sha256=digest, token=token, traffic_mode="customized")
        ],
    )

    async def main() -> None:
        runner = await start_gateway(
            GatewaySettings(),
            StaticRouteSource(table),
            host="127.0.0.1",
            port=port,
            reuse_port=workers > 1,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        await stop.wait()
        await runner.close()

    from gateway.cli import run

    children: list[int] = []
    for _ in range(workers - 1):
        pid = os.fork()
        if pid == 0:  # a worker: serve until SIGTERM, then leave
            run(main())
            os._exit(0)
        children.append(pid)
    run(main())  # the first worker; its SIGTERM stops the others
    for pid in children:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)


def serve_floor(port: int, upstream_port: int) -> None:
    """``--serve-floor``: the least any relay written on this event loop can cost, a blind
    TCP forwarder (one upstream connection per caller connection, bytes passed as read,
    nothing parsed, no token checked), measured beside the gateway as a reference; also
    ``bench/grpc.py --floor``."""
    import uvloop

    class Leg(asyncio.Protocol):
        def __init__(self) -> None:
            self.peer: Leg | None = None
            self.transport: asyncio.Transport | None = None
            self.early: list[bytes] = []  # what the caller sent before the replica answered

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]

        def data_received(self, data: bytes) -> None:
            peer = self.peer
            if peer is not None and peer.transport is not None:
                peer.transport.write(data)
            else:
                self.early.append(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.close()

    class Caller(Leg):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            asyncio.get_running_loop().create_task(self.connect())

        async def connect(self) -> None:
            loop = asyncio.get_running_loop()
            _, replica = await loop.create_connection(Leg, "127.0.0.1", upstream_port)
            replica.peer, self.peer = self, replica
            # What either side sent before they were joined (the replica's SETTINGS too).
            for leg in (self, replica):
                assert leg.peer is not None and leg.peer.transport is not None
                leg.peer.transport.writelines(leg.early)
                leg.early = []

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Caller, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


# --- orchestration ----------------------------------------------------------------------


def start_triton(tmp: Path, cpu: int) -> tuple[list[str], dict[str, str], int]:
    argv, env, port = tritonserver("--log-verbose=0")
    return pinned(cpu, argv), env, port


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    ap.add_argument(
        "--duration-large",
        type=float,
        default=12.0,
        help="seconds per wrk run for the 1 MB model (its requests take ~25 ms of Triton "
        "each: at 64 connections a short run holds only a couple of rounds)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="interleaved wrk runs per point")
    ap.add_argument("--connections", default="1,8,64")
    ap.add_argument("--sequential-small", type=int, default=1000)
    ap.add_argument("--sequential-large", type=int, default=300)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--models", default="add_sub,inception_graphdef")
    ap.add_argument(
        "--targets",
        default="direct,nginx,gateway,signed,group",
        help="of direct, nginx, gateway, signed (the gateway, called with EAS's signature), "
        "dressed (the gateway, called with the token and a signed call's other headers), "
        "group and floor (a blind TCP forwarder on the gateway's event loop, pinned like it: "
        "the least a Python proxy costs)",
    )
    ap.add_argument(
        "--base",
        type=Path,
        help="another checkout (e.g. `git worktree add /tmp/perf-base main`): adds the target "
        "`base`, the gateway as that checkout's code serves it, for before/after in one run; "
        "without a build of its own, its gateway is compiled in place first (bench/builds.py)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="gateway worker processes (SO_REUSEPORT, as `openeas gateway --workers N`); "
        "with more than one, the server side is pinned to as many CPUs from --server-cpu on",
    )
    ap.add_argument(
        "--up",
        action="store_true",
        help="add the target `up`: the gateway as `openeas up` runs it (beside the control "
        "plane in one process, its own replica of examples/models started by the local "
        "runtime), pinned like the others, and `nginx@up`, nginx in front of that replica; "
        "with --base also `base-up` and `nginx@base-up`",
    )
    ap.add_argument(
        "--new-connections",
        action="store_true",
        help="every call on a new connection (Connection: close), as a client without "
        "keep-alive calls; the tail line then shows what closed connections cost",
    )
    ap.add_argument("--serve-gateway", nargs=3, metavar=("PORT", "UPSTREAM", "TOKEN"))
    ap.add_argument("--serve-floor", nargs=2, type=int, metavar=("PORT", "UPSTREAM_PORT"))
    args = ap.parse_args(argv)
    if args.serve_floor:
        serve_floor(*args.serve_floor)
        return 0
    if args.serve_gateway:
        port, upstream, token = args.serve_gateway
        serve_gateway(int(port), upstream, token, args.workers)
        return 0
    for tool in ("nginx", "wrk", "taskset"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            print(
                f"bench: {tool} not found (apt-get install nginx wrk util-linux)", file=sys.stderr
            )
            return 2
    announce(ROOT, args.base)
    # SIGTERM unwinds like Ctrl-C, so every process started below is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    os.sched_setaffinity(0, {args.client_cpu})
    conns = [int(c) for c in args.connections.split(",")]
    fresh = args.new_connections
    targets = args.targets.split(",")
    token = secrets.token_hex(16)

    with tempfile.TemporaryDirectory(prefix="openeas-bench-") as tmpdir:
        tmp = Path(tmpdir)
        workloads = [
            w
            for w in make_bodies(tmp, args.sequential_small, args.sequential_large)
            if w.model in args.models.split(",")
        ]
        lua = tmp / "post.lua"
        record = tmp / "runs.log"  # when each wrk run was (kept with the logs)
        lua.write_text(WRK_LUA)
        triton_argv, triton_env, triton_port = start_triton(tmp, args.server_cpu)
        triton_base = f"http://127.0.0.1:{triton_port}"
        nginx_port, gateway_port, floor_port = free_port(), free_port(), free_port()
        write_nginx_conf(tmp, triton_port, nginx_port, token)
        serve = ["--workers", str(args.workers), "--serve-gateway"]
        gateway_argv = [sys.executable, __file__, *serve, str(gateway_port), triton_base, token]
        gateway_cpus = ",".join(str(args.server_cpu + i) for i in range(args.workers))
        base_port = free_port()
        base_argv = [sys.executable, str(args.base / "bench" / "gateway.py") if args.base else ""]
        base_argv += ["--serve-gateway", str(base_port), triton_base, token]
        base_env = dict(os.environ, PYTHONPATH=str(args.base))
        if args.base:
            # beside the gateway it came before, or last when only `up` targets are asked
            at = targets.index("gateway") if "gateway" in targets else len(targets)
            targets.insert(at, "base")
        with (
            process(triton_argv, tmp / "triton.log", env=triton_env) as triton,
            process(nginx_argv(tmp, args.server_cpu), tmp / "nginx.log") as ngx,
            process(pinned_cpus(gateway_cpus, gateway_argv), tmp / "gateway.log") as gw,
            contextlib.ExitStack() as more,
        ):
            pids: dict[str, int] = {}
            if "floor" in targets:
                argv = [sys.executable, __file__, "--serve-floor", str(floor_port)]
                argv = pinned(args.server_cpu, [*argv, str(triton_port)])
                pids["floor"] = more.enter_context(process(argv, tmp / "floor.log")).pid
            if args.base:
                argv = pinned(args.server_cpu, base_argv)
                proc = more.enter_context(process(argv, tmp / "base.log", env=base_env))
                pids["base"] = proc.pid
                wait_http(f"http://127.0.0.1:{base_port}/gateway/healthz", proc)
            pids |= {"nginx": ngx.pid, "gateway": gw.pid, "group": gw.pid}
            pids |= {"signed": gw.pid, "dressed": gw.pid}
            ups = {}
            fronts: dict[str, Front] = {}  # nginx in front of a platform's own replica
            if args.up:
                trees = {"up": ROOT} | ({"base-up": args.base} if args.base else {})
                for name, tree in trees.items():
                    (tmp / name).mkdir()
                    ups[name] = platform = Platform(tree, tmp / name, str(args.server_cpu))
                    platform.start()
                    more.callback(platform.stop)
                    platform.create(SERVICE, token)
                    targets.append(name)
                    # the same nginx in front of the same replica: the platform's ratio to
                    # nginx on one Triton (up's replica and the bench's differ by more)
                    front = Front(
                        name, tmp / name / "nginx", free_port(), platform.replica_port(SERVICE)
                    )
                    write_nginx_conf(front.home, front.upstream, front.port, token)
                    argv = nginx_argv(front.home, args.server_cpu)
                    proc = more.enter_context(process(argv, tmp / name / "nginx.log"))
                    front.pid = proc.pid
                    wait_http(f"http://127.0.0.1:{front.port}/", proc)
                    fronts[f"nginx@{name}"] = front
                    targets.append(f"nginx@{name}")
            # whose CPU a row counts per request as Triton's and as its proxy's
            meters = {name: Meter(triton=triton.pid, proxy=pid) for name, pid in pids.items()}
            meters["direct"] = Meter(triton=triton.pid)
            meters |= {name: Meter(platform=p.pid) for name, p in ups.items()}
            for name, front in fronts.items():
                meters[name] = Meter(platform=ups[front.platform].pid, proxy=front.pid)
            # the platform whose replica a row is in front of, called directly as a row too
            replica_of = {name: name for name in ups} | {n: f.platform for n, f in fronts.items()}
            wait_http(f"{triton_base}/v2/health/ready", triton)
            wait_http(f"http://127.0.0.1:{nginx_port}/", ngx)
            wait_http(f"http://127.0.0.1:{gateway_port}/gateway/healthz", gw)
            prefix = f"/api/predict/{SERVICE}"
            endpoints = {
                "direct": (f"127.0.0.1:{triton_port}", "", None),
                "floor": (f"127.0.0.1:{floor_port}", "", None),  # bytes pass to Triton as sent
                "nginx": (f"127.0.0.1:{nginx_port}", prefix, token),
                "gateway": (f"127.0.0.1:{gateway_port}", prefix, token),
                "signed": (f"127.0.0.1:{gateway_port}", prefix, token),
                "dressed": (f"127.0.0.1:{gateway_port}", prefix, token),
                "base": (f"127.0.0.1:{base_port}", prefix, token),
                **{name: (f"127.0.0.1:{p.port}", prefix, token) for name, p in ups.items()},
                **{name: (f"127.0.0.1:{f.port}", prefix, token) for name, f in fronts.items()},
                "group": (f"127.0.0.1:{gateway_port}", f"/api/predict/{GROUP}", token),
            }
            print(
                f"server side pinned to CPU {args.server_cpu}, clients to CPU {args.client_cpu}; "
                f"wrk {args.duration:g} s per run ({args.duration_large:g} s for the 1 MB model)",
                flush=True,
            )
            failures = 0
            for w in workloads:
                print(f"\n== {w.model} ({w.body.stat().st_size} B request) ==", flush=True)
                probes = {}
                # each platform's replica as it last started, read once for the phase
                replica_ports = {name: p.replica_port(SERVICE) for name, p in ups.items()}
                for front in fronts.values():
                    front.follow(replica_ports[front.platform], token)
                try:
                    for name in targets:
                        hostport, pre, tok = endpoints[name]
                        signing = name in SIGNED | DRESSED
                        signed = f"{pre}/v2/models/{w.model}/infer" if signing else None
                        probes[name] = LatencyProbe(
                            hostport + pre, w, tok, signed, dressed=name in DRESSED
                        )
                    for name, port in replica_ports.items():  # its own Triton, called directly
                        probes[f"{name}:replica"] = LatencyProbe(f"127.0.0.1:{port}", w, None)
                    started = clock()
                    lat = sequential_latency(probes, w.sequential)
                    record_run(record, started, f"{w.model} sequential latency")
                finally:
                    for probe in probes.values():
                        probe.close()
                print(
                    "sequential latency, ms (tritonclient, binary tensors; calls interleaved; "
                    f"[the added p50's range over {args.repeat} slices of the calls]):"
                )
                d50 = pct(lat["direct"], 50) if "direct" in lat else 0.0
                n50 = pct(lat["nginx"], 50) if "nginx" in lat else 0.0
                for name, s in lat.items():
                    added = pct(s, 50) - d50
                    line = (
                        f"  {name:8s} p50 {pct(s, 50):7.3f}  p95 {pct(s, 95):7.3f}  "
                        f"p99 {pct(s, 99):7.3f}  added p50 {added:+.3f}"
                    )
                    if name != "direct" and "direct" in lat:
                        line += added_p50_range(s, lat["direct"], args.repeat)
                    if name in ("gateway", "base", "up", "base-up") and "nginx" in lat:
                        line += f"  ({ratio(added, n50 - d50)} nginx's added p50)"
                    if name == "group" and "gateway" in lat:
                        line += f"  (p50 {ratio(pct(s, 50), pct(lat['gateway'], 50))} gateway's)"
                    for other in ("gateway", "dressed"):
                        if name in SIGNED | DRESSED and other in lat and other != name:
                            over = pct(s, 50) - pct(lat[other], 50)
                            spread = added_p50_range(s, lat[other], args.repeat)
                            line += f"\n{'':12s}p50 {over:+.3f} over {other}'s{spread}"
                    if name in replica_of:
                        own = lat[f"{replica_of[name]}:replica"]
                        over = pct(s, 50) - pct(own, 50)
                        line += (
                            f"\n{'':12s}over its own replica {over:+.3f}"
                            f"{added_p50_range(s, own, args.repeat)}"
                        )
                        if (beside := lat.get(f"nginx@{name}")) is not None:
                            line += (
                                f" ({ratio(over, pct(beside, 50) - pct(own, 50))} nginx@{name}'s)"
                            )
                    print(line, flush=True)
                print(
                    "throughput, requests/s (wrk; median of "
                    f"{args.repeat}, ratio to direct, to nginx):"
                )
                for c in conns:
                    runs: dict[str, list[WrkResult]] = {name: [] for name in targets}
                    # CPU µs per request of the proxy and of Triton, the least of the rounds
                    cpu: dict[str, list[float]] = {name: [] for name in targets}
                    user: dict[str, list[float]] = {name: [] for name in targets}  # its part
                    triton_cpu: dict[str, list[float]] = {name: [] for name in targets}
                    for round_no in range(args.repeat):  # interleaved: noise hits all alike
                        for name in round_order(targets, round_no):
                            hostport, pre, tok = endpoints[name]
                            path = f"{pre}/v2/models/{w.model}/infer"
                            base = f"http://{hostport}"
                            if (front := fronts.get(name)) is not None:
                                port = ups[front.platform].replica_port(SERVICE)
                                front.follow(port, token)
                            label = f"{w.model} c={c} round {round_no + 1} {name}"
                            wrk = (args.client_cpu, base, path, w, tok, c)
                            how = (fresh, name in SIGNED, name in DRESSED)
                            recorded_wrk(record, f"{label} (warm-up)", *wrk, 1.0, lua, *how)
                            seconds = args.duration if w.model == "add_sub" else args.duration_large
                            before = meters[name].seconds()
                            r = recorded_wrk(record, label, *wrk, seconds, lua, *how)
                            after = meters[name].seconds()
                            runs[name].append(r)
                            t_us, p_us, u_us = (
                                (a - b) * 1e6 / max(1, r.requests)
                                for a, b in zip(after, before, strict=True)
                            )
                            triton_cpu[name].append(t_us)
                            if name != "direct":
                                cpu[name].append(p_us)
                                user[name].append(u_us)
                            failures += r.non200 + r.sockerr
                            if r.non200 or r.sockerr:
                                print(
                                    f"        ! {name}, round {round_no + 1}: {r.non200} "
                                    f"non-200 answers, {r.sockerr} socket errors",
                                    flush=True,
                                )
                    res = {
                        name: sorted(rs, key=lambda r: r.rps)[len(rs) // 2]
                        for name, rs in runs.items()
                    }
                    parts = []
                    for name, r in res.items():
                        part = f"{name} {r.rps:8.1f}"
                        if name != "direct" and "direct" in res:
                            part += f" ({ratio(r.rps, res['direct'].rps)} direct"
                            if name != "nginx" and "nginx" in res:
                                part += f", {ratio(r.rps, res['nginx'].rps)} nginx"
                            if name == "gateway" and "base" in res:
                                part += f", {ratio(r.rps, res['base'].rps)} base"
                            if name == "up" and "base-up" in res:
                                part += f", {ratio(r.rps, res['base-up'].rps)} base-up"
                            if (pair := f"nginx@{name}") in res:
                                part += f", {ratio(r.rps, res[pair].rps)} {pair}"
                            if name in ("group", *SIGNED, *DRESSED) and "gateway" in res:
                                part += f", {ratio(r.rps, res['gateway'].rps)} gateway"
                            part += ")"
                        bad = sum(x.non200 + x.sockerr for x in runs[name])
                        if bad:
                            part += f" [{bad} failed]"
                        parts.append(part)
                    print(f"  c={c:<3d} " + " | ".join(parts), flush=True)
                    if "nginx" in runs:
                        paired = [
                            f"{name} {paired_ratio(rs, runs['nginx'])}"
                            for name, rs in runs.items()
                            if name not in ("direct", "nginx")
                        ]
                        print("        × nginx, round by round: " + " | ".join(paired), flush=True)
                    paired = [
                        f"{name} {paired_ratio(runs[name], runs[f'nginx@{name}'])}"
                        for name in ups
                        if f"nginx@{name}" in runs
                    ]
                    if paired:
                        line = " | ".join(paired)
                        print(
                            f"        × nginx on its own replica, round by round: {line}",
                            flush=True,
                        )
                    line = " | ".join(
                        f"{name} {min(us):.0f} (user {min(user[name]):.0f})"
                        for name, us in cpu.items()
                        if us
                    )
                    line += "; Triton's: " + " | ".join(
                        f"{name} {min(us):.0f}" for name, us in triton_cpu.items() if us
                    )
                    print(f"        CPU µs/request, least of {args.repeat}: {line}", flush=True)
                    line = " | ".join(f"{name} {tail(rs)}" for name, rs in runs.items())
                    print(
                        f"        tail, ms (wrk's p99/p99.9/max, median of {args.repeat}): {line}",
                        flush=True,
                    )
            restarted = replica_restarts(tmp)
            for line in restarted:
                print(f"\n! {line}")
            if failures:
                print(f"\n{failures} requests failed during the throughput runs")
            if failures or restarted:
                # runs.log says when each wrk run was: beside a replica's log, what it crashed in
                print(f"the run's logs are kept in {keep_logs(tmp)}")
            if failures:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
