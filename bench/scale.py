"""Benchmark of the control plane with thousands of services, on SQLite and PostgreSQL.

Run by hand (``python bench/scale.py [--services 10000]``) for the figures in the scale
issue's closing note. For each database it starts ``openeas controlplane`` (local runtime,
``--migrate``) and ``openeas gateway`` as separate processes on loopback, then:

1. creates ``--running`` services with one real Triton replica each (``examples/models``) and
   waits for them, then ``--services`` services with ``instance: 0`` from ``--concurrency``
   clients: the create rate, how long after the last create some are still ``Creating``
   and the control plane stays busy (its after-work, PostgreSQL's upkeep included), and the
   control plane's CPU per create until then (steadier than a rate on a busy host);
2. lists the first page, a late page by ``pageNumber`` and by ``pageToken``, and describes
   random services: p50 and p99 of each;
3. waits past one resync and measures the CPU the control plane and the gateway use over
   ``--idle-seconds`` while nothing changes (Triton replicas are not counted);
4. the gateway's resident memory grown by the route table (RSS after minus before), and a
   second gateway started on the stored services: how long its first sync takes, and its
   peak and steady resident memory;
5. the time a token rotation takes to reach the gateway (the old token answers 401) and a
   scale change (the gateway's route-table version moves).

``--base DIR`` runs the same against another checkout (e.g. ``git worktree add
/tmp/scale-base main``; its gateway compiled in place first, ``bench/builds.py``), right
after this one on each database, and prints each figure's ratio this / base.

Everything is bounded and talks to 127.0.0.1 only. PostgreSQL: a fresh database on the
server at ``--postgres`` (default the test server), dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx

# bench/builds.py: a --base checkout's gateway compiled like this one's
from builds import announce
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

# bench/deploy.py: what the benches share (run as scripts: their folder is on the path)
from deploy import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
ADMIN = "bench-admin-token-0123456789abcdef"
PAGE_SIZE = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_mib(pid: int, field: str) -> float:
    """A memory figure of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``: the peak) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_mib(pid: int) -> float:
    return proc_mib(pid, "VmRSS")


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.002)
    return time.monotonic() - started


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@contextmanager
def sqlite_database() -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="openeas-scale-db-"))
    try:
        yield f"sqlite:///{folder / 'openeas.db'}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def postgres_database(server_url: str) -> Iterator[str]:
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    name = f"openeas_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class Platform:
    """``openeas controlplane`` + ``openeas gateway`` as two processes."""

    def __init__(self, database_url: str, data_dir: Path, resync_s: float, tree: Path) -> None:
        self.cp_port, self.gw_port = free_port(), free_port()
        self.cp = f"http://127.0.0.1:{self.cp_port}"
        self.gw = f"http://127.0.0.1:{self.gw_port}"
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        env |= {
            "OPENEAS_DATA_DIR": str(data_dir),
            "OPENEAS_DATABASE_URL": database_url,
            "OPENEAS_ADMIN_TOKEN": ADMIN,
            "OPENEAS_RESYNC_SECONDS": str(resync_s),
            "OPENEAS_CONTROLPLANE_URL": self.cp,
            "PYTHONPATH": str(tree),
        }
        openeas = [sys.executable, "-m", "openeas.cli"]
        log = (data_dir / "platform.log").open("w")
        self.controlplane = subprocess.Popen(
            [*openeas, "controlplane", "--migrate", "--port", str(self.cp_port)],
            env=env,
            cwd=tree,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._gateway_command = (openeas, env, tree, log)
        self.gateway = self.start_gateway(self.gw_port)
        self.api = httpx.Client(
            base_url=self.cp, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
        )
        wait_until(lambda: self._up(f"{self.cp}/healthz"), 60, "the control plane")
        wait_until(lambda: self._up(f"{self.gw}/gateway/healthz"), 60, "the gateway")

    def start_gateway(self, port: int) -> subprocess.Popen[bytes]:
        openeas, env, tree, log = self._gateway_command
        return subprocess.Popen(
            [*openeas, "gateway", "--port", str(port), "--log-level", "WARNING"],
            env=env,
            cwd=tree,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def first_sync(self) -> tuple[float, float, float]:
        """A second gateway started on the stored services: seconds until it serves the
        control plane's whole table, and its peak and steady resident memory (MiB)."""
        version = self.route_version()
        port = free_port()
        started = time.monotonic()
        gateway = self.start_gateway(port)
        try:

            def synced() -> bool:
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/gateway/healthz", timeout=1)
                except httpx.HTTPError:
                    return False
                return (health.json().get("route_table_version") or -1) >= version

            wait_until(synced, 600, "a new gateway's first sync")
            took = time.monotonic() - started
            return took, proc_mib(gateway.pid, "VmHWM"), proc_mib(gateway.pid, "VmRSS")
        finally:
            gateway.terminate()
            gateway.wait(30)

    @staticmethod
    def _up(url: str) -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def route_version(self) -> int:
        return int(httpx.get(f"{self.gw}/gateway/healthz", timeout=5).json()["route_table_version"])

    def predict_status(self, service: str, token: str) -> int:
        url = f"{self.gw}/api/predict/{service}/v2/health/ready"
        return httpx.get(url, headers={"Authorization": token}, timeout=5).status_code

    def stop(self) -> None:
        self.api.close()
        for proc in (self.gateway, self.controlplane):
            proc.terminate()
        for proc in (self.gateway, self.controlplane):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def spec(name: str, instance: int) -> dict[str, Any]:
    return {
        "name": name,
        "processor": "triton",
        "processor_params": [f"--model-repository={ROOT / 'examples' / 'models'}"],
        "metadata": {"instance": instance, "cpu": 1, "memory": 1000},
    }


async def create_many(base: str, names: list[str], concurrency: int) -> float:
    """Create ``names`` (``instance: 0``) from ``concurrency`` clients; services per second."""
    queue = list(reversed(names))

    async def client() -> None:
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
        ) as http:
            while queue:
                r = await http.post("/api/v2/services", json=spec(queue.pop(), 0))
                r.raise_for_status()

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return len(names) / (time.monotonic() - started)


def quiet(pid: int, window: float = 0.5, share: float = 0.1, timeout: float = 120) -> float:
    """Seconds until ``pid`` spends under ``share`` of a core over ``window``: the burst's
    after-work (status writes, PostgreSQL's upkeep) done, so what follows is measured on a
    settled control plane."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = cpu_seconds(pid, descendants=False)
        time.sleep(window)
        if cpu_seconds(pid, descendants=False) - before < share * window:
            return time.monotonic() - started - window
    raise RuntimeError("the control plane stayed busy")


def timed(call: Callable[[], httpx.Response], count: int) -> tuple[float, float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call().raise_for_status()
        samples.append((time.perf_counter() - started) * 1000)
    return percentiles(samples)


def run_one(label: str, database_url: str, args: argparse.Namespace, tree: Path) -> dict[str, str]:
    data_dir = Path(tempfile.mkdtemp(prefix="openeas-scale-"))
    platform = Platform(database_url, data_dir, args.resync_seconds, tree)
    out: dict[str, str] = {}
    try:
        api = platform.api
        running = [f"running_{i}" for i in range(args.running)]
        for name in running:
            api.post("/api/v2/services", json=spec(name, 1)).raise_for_status()
        for name in running:
            wait_until(
                lambda n=name: (
                    api.get(f"/api/v2/services/local/{n}").json()["Status"]  # type: ignore[misc]
                    == "Running"
                ),
                180,
                f"{name} running",
            )
        gw_rss_before = rss_mib(platform.gateway.pid)
        names = [f"svc_{i:06d}" for i in range(args.services)]
        cpu_before = cpu_seconds(platform.controlplane.pid, descendants=False)
        rate = asyncio.run(create_many(platform.cp, names, args.concurrency))
        out["create rate"] = f"{rate:.0f}/s"
        drained = wait_until(  # the reconciler has caught up with every create
            lambda: (
                api.get("/api/v2/services", params={"status": "Creating"}).json()["TotalCount"] == 0
            ),
            600,
            "the reconciler to catch up",
        )
        out["still Creating after the last create"] = f"{drained:.1f} s"
        settled = drained + quiet(platform.controlplane.pid)
        out["control plane busy after the last create"] = f"{settled:.1f} s"
        cpu = cpu_seconds(platform.controlplane.pid, descendants=False) - cpu_before
        out["control-plane CPU per create, drained"] = f"{cpu / args.services * 1000:.2f} ms"

        total = args.services + args.running
        late = max(1, total // PAGE_SIZE - 1)
        first = timed(lambda: api.get("/api/v2/services"), args.samples)
        deep = timed(lambda: api.get("/api/v2/services", params={"pageNumber": late}), args.samples)
        token = ""
        params: dict[str, Any] = {"pageSize": 100}
        for _ in range(total // 100 - 1):  # walk to a late page by token
            token = api.get("/api/v2/services", params=params).json()["NextPageToken"]
            params["pageToken"] = token
        by_token = timed(
            lambda: api.get("/api/v2/services", params={"pageToken": token}), args.samples
        )
        describe = timed(
            lambda: api.get(f"/api/v2/services/local/{random.choice(names)}"), args.samples * 2
        )
        out["list p50/p99, first page"] = "{:.1f} / {:.1f} ms".format(*first)
        out[f"list p50/p99, page {late} (pageNumber)"] = "{:.1f} / {:.1f} ms".format(*deep)
        out["list p50/p99, late page (pageToken)"] = "{:.1f} / {:.1f} ms".format(*by_token)
        out["describe p50/p99"] = "{:.1f} / {:.1f} ms".format(*describe)

        wait_until(lambda: platform.route_version() > 0, 30, "the gateway's table")
        out["gateway route-table memory"] = (
            f"{rss_mib(platform.gateway.pid) - gw_rss_before:.1f} MiB for {total} routes"
        )

        took, peak, steady = platform.first_sync()
        out["a new gateway's first sync"] = (
            f"{took:.1f} s, peak {peak:.0f} MiB, then {steady:.0f} MiB resident"
        )

        target = names[len(names) // 2]
        old = api.get(f"/api/v2/services/local/{target}/token").json()["Token"]
        wait_until(lambda: platform.predict_status(target, old) == 503, 30, "the first route")
        started = time.monotonic()
        new = api.post(f"/api/v2/services/local/{target}/token").json()["Token"]
        wait_until(lambda: platform.predict_status(target, old) == 401, 30, "the rotation")
        out["token rotation → gateway"] = f"{(time.monotonic() - started) * 1000:.0f} ms"
        assert platform.predict_status(target, new) == 503

        before = platform.route_version()
        started = time.monotonic()
        api.put(f"/api/v2/services/local/{target}/scale", json={"Instance": 1}).raise_for_status()
        wait_until(lambda: platform.route_version() > before, 30, "the scale change")
        out["scale change → gateway"] = f"{(time.monotonic() - started) * 1000:.0f} ms"
        api.put(f"/api/v2/services/local/{target}/scale", json={"Instance": 0})

        time.sleep(args.resync_seconds + 5)  # past one resync, then measure a quiet minute
        pids = [platform.controlplane.pid, platform.gateway.pid]
        cpu_before = sum(cpu_seconds(p, descendants=False) for p in pids)
        time.sleep(args.idle_seconds)
        idle = (
            (sum(cpu_seconds(p, descendants=False) for p in pids) - cpu_before)
            / args.idle_seconds
            * 100
        )
        out[f"idle CPU over {args.idle_seconds:.0f} s (control plane + gateway)"] = f"{idle:.2f} %"
    finally:
        platform.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"\n{label}: {args.services} services, {args.running} running ({tree})")
    for key, value in out.items():
        print(f"  {key:<48} {value}")
    return out


def leading_number(figure: str) -> float | None:
    """The first number of a printed figure: the rate, the p50, the ms, MiB or %."""
    found = re.search(r"-?\d+(?:\.\d+)?", figure)
    return float(found.group()) if found else None


def ratios(ours: dict[str, str], base: dict[str, str]) -> dict[str, str]:
    """Each figure of this checkout over the base's (higher is better only for the create
    rate; for times, memory and CPU, lower is)."""
    shown = {}
    for key, figure in ours.items():
        a, b = leading_number(figure), leading_number(base.get(key, ""))
        shown[key] = f"{a / b:.2f}x" if a is not None and b else "n/a"
    return shown


def compare(
    label: str, database_url: Callable[[], AbstractContextManager[str]], args: argparse.Namespace
) -> None:
    """One database: this checkout, then ``--base`` on a database of its own, and the ratios."""
    with database_url() as url:
        ours = run_one(label, url, args, ROOT)
    if args.base is None:
        return
    with database_url() as url:
        base = run_one(f"{label}, base", url, args, args.base.resolve())
    print(f"\n{label}: this / base")
    for key, shown in ratios(ours, base).items():
        print(f"  {key:<48} {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=2, help="services with a Triton replica")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--samples", type=int, default=200, help="requests per latency figure")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--resync-seconds", type=float, default=30.0)
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--base", type=Path, help="another checkout, measured after this one")
    args = parser.parse_args()
    announce(ROOT, args.base)
    for database in args.databases.split(","):
        if database == "sqlite":
            compare("SQLite", sqlite_database, args)
        else:
            compare("PostgreSQL", lambda: postgres_database(args.postgres), args)


if __name__ == "__main__":
    main()
