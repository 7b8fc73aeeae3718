"""The data plane outlives the control plane on the Kubernetes runtime, end to end.

Real processes: ``openeas controlplane`` (one, or two sharing PostgreSQL), ``openeas
gateway``, and a replica process per pod started by the kubelet stand-in
(:mod:`testing.kubelet`) beside the API stand-in, which also runs the Deployment controller,
so the cluster goes on while control planes die. The gateway reaches the control planes
through a Service stand-in (:mod:`testing.service_proxy`), as in the chart.

Shown: a SIGKILLed control plane stops no prediction; with two, the leader SIGKILLed in the
middle of a rolling update under load fails no request, the other leads within the lease,
and the rollout completes; a replica's pull progress and "loading models" reach ``eascmd
desc`` and the lines ``eascmd create`` prints while it waits, from the pull's log. Prints
the measured takeover time.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from testing.k8s_server import ApiStandIn
from testing.kubelet import Kubelet
from testing.service_proxy import ServiceProxy
from testing.waiting import WaitTimeout, wait_until
from tests.fixtures_db import _reset_postgres
from tests.fixtures_triton import free_port

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
ADMIN, ROUTES = "admin-" + "a" * 32, "routes-" + "r" * 32
LEASE_S = 3.0
PHASES = ("pulling", "loading models")
SERVICE = "outage_test"
SPEC: dict[str, Any] = {
    "name": SERVICE,
    "processor": "triton",
    "processor_params": ["--model-repository=oss://models/repo"],
    "metadata": {"instance": 2, "cpu": 1, "memory": 1000},
}


@dataclass
class Proc:
    name: str
    url: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


class Cluster:
    """The API stand-in with its kubelet, control planes, a Service over them, a gateway."""

    def __init__(
        self, tmp: Path, database_url: str, *, pull_seconds: float = 0.0, load_seconds: float = 0.0
    ) -> None:
        self.tmp = tmp
        self.api = ApiStandIn().start()
        self.kubelet = Kubelet(
            self.api, pull_seconds=pull_seconds, load_seconds=load_seconds
        ).start()
        self.env = {
            **os.environ,
            "HOME": str(tmp / "home"),
            "OPENEAS_DATABASE_URL": database_url,
            "OPENEAS_ADMIN_TOKEN": ADMIN,
            "OPENEAS_ROUTES_TOKEN": ROUTES,
            "OPENEAS_SECRET_KEY": "k" * 32,  # shared: any replica opens any sealed token
            "OPENEAS_RUNTIME": "kubernetes",
            "OPENEAS_LEASE_SECONDS": str(LEASE_S),
            "OPENEAS_K8S_KUBECONFIG": str(self.api.write_kubeconfig(tmp / "kubeconfig")),
            "OPENEAS_K8S_PRESTOP_SECONDS": "8",
            "OPENEAS_K8S_PROGRESS_SECONDS": "0.3",
        }
        for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "OPENEAS_DATA_DIR"):
            self.env.pop(name, None)
        self.procs: list[Proc] = []
        self.proxy: ServiceProxy | None = None

    def migrate(self) -> None:
        done = subprocess.run(
            [str(BIN / "openeas"), "migrate"], env=self._env("migrate"), capture_output=True
        )
        assert done.returncode == 0, done.stderr.decode()

    def controlplane(self) -> Proc:
        port = free_port()
        proc = self._spawn(f"cp{len(self.procs)}", port, ["controlplane", "--port", str(port)])
        self._wait_http(proc, "/readyz")
        return proc

    def gateway(self, controlplane_url: str) -> Proc:
        port = free_port()
        env = {"OPENEAS_CONTROLPLANE_URL": controlplane_url}
        proc = self._spawn("gateway", port, ["gateway", "--port", str(port)], env)
        self._wait_http(proc, "/gateway/healthz")
        return proc

    def service_over(self, *procs: Proc) -> str:
        backends = [("127.0.0.1", int(p.url.rsplit(":", 1)[1])) for p in procs]
        self.proxy = ServiceProxy(backends).start()
        return self.proxy.url

    def stop(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.kill()
                proc.popen.wait(10)
        if self.proxy is not None:
            self.proxy.stop()
        self.kubelet.stop()
        self.api.stop()

    def _env(self, name: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**self.env, "OPENEAS_DATA_DIR": str(self.tmp / name), **(extra or {})}

    def _spawn(
        self, name: str, port: int, argv: list[str], env: dict[str, str] | None = None
    ) -> Proc:
        log = self.tmp / f"{name}.log"
        popen = subprocess.Popen(
            [str(BIN / "openeas"), *argv],
            env=self._env(name, env),
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        proc = Proc(name, f"http://127.0.0.1:{port}", popen, log)
        self.procs.append(proc)
        return proc

    @staticmethod
    def _wait_http(proc: Proc, path: str) -> None:
        def up() -> bool:
            try:
                return httpx.get(proc.url + path, timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        try:
            wait_until(up, 60, interval=0.1, what=f"{proc.name} answers {path}")
        except WaitTimeout as e:
            raise AssertionError(proc.tail()) from e


class Api:
    """The control-plane REST API with the admin credential."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10
        )

    def create(self, spec: dict[str, Any]) -> str:
        r = self.http.post("/api/v2/services", json=spec)
        assert r.status_code == 200, r.text
        return str(r.json()["Token"])

    def describe(self) -> dict[str, Any]:
        r = self.http.get(f"/api/v2/services/local/{SERVICE}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def modify(self, change: dict[str, Any]) -> None:
        r = self.http.put(f"/api/v2/services/local/{SERVICE}", json=change)
        assert r.status_code == 200, r.text


@dataclass
class Load:
    """Bounded load through the gateway from a few threads: each request's outcome, and the
    generation (pod template) of the replica that answered."""

    url: str
    token: str
    threads: int = 6
    interval_s: float = 0.02  # per thread: about 300 requests/s in all
    results: list[tuple[float, int, str]] = field(default_factory=list)  # (time, status, gen)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        self._workers = [threading.Thread(target=self._run) for _ in range(self.threads)]
        for worker in self._workers:
            worker.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(30)

    def generations(self, last: int) -> set[str]:
        return {gen for _, _, gen in self.results[-last:]}

    def _run(self) -> None:
        path = f"/api/predict/{SERVICE}/v2/models/m/infer"
        with httpx.Client(base_url=self.url, headers={"Authorization": self.token}) as client:
            while not self._stop.is_set():
                sent = time.monotonic()
                try:
                    r = client.post(path, content=b'{"inputs": []}', timeout=10)
                    gen = r.json().get("generation", "") if r.status_code == 200 else ""
                    self.results.append((sent, r.status_code, gen))
                    if r.status_code != 200:
                        self.failures.append(f"{r.status_code} {r.text[:200]}")
                except httpx.HTTPError as e:
                    self.failures.append(repr(e))
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - sent)))

    def longest_gap(self) -> float:
        times = sorted(t for t, status, _ in self.results if status == 200)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def _running(svc: dict[str, Any]) -> bool:
    replicas = svc.get("Replicas") or []
    return (
        svc.get("Status") == "Running"
        and len(replicas) == SPEC["metadata"]["instance"]
        and all(r.get("current") and r.get("state") == "Running" for r in replicas)
    )


class Lease:
    """The reconciler lease as the database holds it."""

    def __init__(self, database_url: str) -> None:
        self.engine = create_engine(database_url)

    def holder(self) -> tuple[int, float]:
        """The holder's pid, and the seconds its lease has left."""
        with self.engine.connect() as conn:
            row = conn.execute(
                text("SELECT holder, expires_at - now() FROM leases WHERE name = 'reconciler'")
            ).one()
        return int(row[0].split(":")[1]), row[1].total_seconds()


@pytest.fixture
def pg_url(postgres_server_url: str) -> str:
    _reset_postgres(postgres_server_url)
    return postgres_server_url


@pytest.fixture
def two_planes(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path, pg_url)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_the_leader_killed_in_a_rolling_update_under_load_fails_no_request(
    two_planes: Cluster, pg_url: str
) -> None:
    cluster = two_planes
    cluster.migrate()
    planes = [cluster.controlplane(), cluster.controlplane()]
    service_url = cluster.service_over(*planes)
    gateway = cluster.gateway(service_url)
    api = Api(service_url)
    token = api.create(SPEC)
    wait_until(lambda: _running(api.describe()), 60, interval=0.2, what="service Running")
    wait_until(
        lambda: (
            httpx.post(
                f"{gateway.url}/api/predict/{SERVICE}/v2/models/m/infer",
                headers={"Authorization": token},
            ).status_code
            == 200
        ),
        10,
        what="the gateway routes to the service",
    )
    old = set(cluster.kubelet.started)
    load = Load(gateway.url, token).start()
    try:
        wait_until(lambda: len(load.results) > 300, 30, what="load before the update")
        first = load.generations(100)
        api.modify({"metadata": {"cpu": 2}})  # a new pod template: a rolling update

        def one_new_pod_serving() -> bool:
            return bool(set(cluster.kubelet.started) - old)

        wait_until(one_new_pod_serving, 30, interval=0.05, what="the rollout's first new pod")
        lease = Lease(pg_url)
        pid, left = lease.holder()
        leader = next(p for p in planes if p.popen.pid == pid)
        survivor = next(p for p in planes if p is not leader)
        leader.popen.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        wait_until(
            lambda: lease.holder()[0] == survivor.popen.pid,
            LEASE_S * 3,
            interval=0.02,
            what="the surviving control plane leads",
        )
        takeover = time.monotonic() - killed
        lease.engine.dispose()
        print(
            f"takeover {takeover:.2f} s after SIGKILL (lease {LEASE_S} s, "
            f"{left:.2f} s of it left at the kill)"
        )
        assert takeover <= LEASE_S + 1.0  # the lease, and room for a loaded machine

        wait_until(lambda: _running(api.describe()), 60, interval=0.2, what="the rollout completes")
        wait_until(
            lambda: load.generations(200).isdisjoint(first) and len(load.results) > 200,
            30,
            what="only the new generation answers",
        )
        served_after_kill = sum(1 for t, _, _ in load.results if t > killed)
    finally:
        load.stop()
    last_old = max(t for t, _, gen in load.results if gen in first) - killed
    print(
        f"{len(load.results)} requests, {served_after_kill} after the kill, "
        f"longest gap between answers {load.longest_gap():.3f} s, "
        f"the old generation's last answer {last_old:.1f} s after the kill"
    )
    assert load.failures == []
    assert load.longest_gap() < 1.0  # predictions never stopped
    assert api.describe()["Status"] == "Running"


@pytest.fixture
def one_plane(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(
        tmp_path, f"sqlite:///{tmp_path / 'openeas.db'}", pull_seconds=2.0, load_seconds=2.0
    )
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_dead_control_plane_stops_no_prediction_and_pull_progress_shows(
    one_plane: Cluster,
) -> None:
    cluster = one_plane
    cluster.migrate()
    plane = cluster.controlplane()
    gateway = cluster.gateway(plane.url)
    config = cluster.tmp / "outage.config"
    config.write_text(json.dumps({**SPEC, "metadata": {**SPEC["metadata"], "instance": 1}}))
    env = {**cluster.env, "EAS_ENDPOINT": plane.url, "EAS_TOKEN": ADMIN}
    eascmd = str(BIN / "eascmd")
    create = subprocess.Popen(
        [eascmd, "create", str(config)], env=env, stdout=subprocess.PIPE, text=True
    )

    # While the replica pulls and loads, its status says how far it is: in eascmd desc,
    # and in the lines eascmd create prints while it waits.
    seen: list[str] = []

    def described() -> bool:
        out = subprocess.run([eascmd, "desc", SERVICE], env=env, capture_output=True, text=True)
        seen.extend(p for p in PHASES if p in out.stdout and p not in seen)
        return create.poll() is not None

    wait_until(described, 60, interval=0.1, what="eascmd create waits until Running")
    created = create.communicate()[0]
    assert create.returncode == 0, created
    assert seen == list(PHASES), seen
    lines = created.splitlines()
    assert [p for p in PHASES if any(p in line for line in lines)] == list(PHASES), created
    assert lines[-1] == "[OK] Service is running"
    [token] = [line.split("|")[2].strip() for line in lines if line.startswith("| Token")]

    load = Load(gateway.url, token).start()
    try:
        wait_until(lambda: len(load.results) > 200, 30, what="load before the kill")
        plane.popen.send_signal(signal.SIGKILL)
        plane.popen.wait(10)
        killed = time.monotonic()
        wait_until(
            lambda: sum(1 for t, _, _ in load.results if t > killed + 3) > 200,
            30,
            what="answers for seconds after the kill",
        )
        health = httpx.get(f"{gateway.url}/gateway/healthz").json()
    finally:
        load.stop()
    print(f"{len(load.results)} requests, longest gap {load.longest_gap():.3f} s; {health}")
    assert load.failures == []
    assert load.longest_gap() < 1.0
    assert "unreachable since" in str(health)
