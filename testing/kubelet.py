"""A node beside :class:`testing.k8s_server.ApiStandIn`: its kubelet and the Deployment
controller, so a cluster runs by itself while control planes come and go.

For the end-to-end tests of the Kubernetes runtime (a control plane killed, two control
planes handing over): the Deployment controller step (:meth:`ApiStandIn.sync_pods`) runs on
every change, so rollouts advance with no control plane; each pod gets a real process
(:mod:`testing.replica`) listening on its own loopback address (``127.x.y.z``: all of
127.0.0.0/8 is loopback on Linux) at the port the runtime expects
(``http://{podIP}:8000``); once it answers ``/v2/health/ready`` the pod turns Running and
Ready with that ``podIP``. A pod deleted (terminating) or removed by the controller keeps
serving for its preStop sleep, then its process gets SIGTERM and the grace period to finish
what is in flight, as a kubelet does; a terminating pod vanishes then.

With ``pull_seconds``, each pod first "pulls": its ``model-pull`` init container runs and
logs progress lines (:func:`contract.progress.log_line`) for that long, then the server
"loads" for ``load_seconds`` before it answers ready.

Not covered: probes after the first readiness, restarts, resources, scheduling, images.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass
from typing import Any

from contract.progress import Progress, log_line
from controlplane.runtime.kubernetes.manifests import (
    HTTP_PORT,
    PULL_CONTAINER,
    TEMPLATE_HASH_LABEL,
)
from testing import k8s_server as ks
from testing.waiting import wait_until

READY_TIMEOUT_S = 30.0
PULL_BYTES = 64_000_000


@dataclass
class _Pod:
    name: str
    address: str
    spec: dict[str, Any]  # as admitted: a pod the controller removed is read no more
    process: subprocess.Popen[bytes] | None = None
    stopping: bool = False  # deleted: its preStop runs
    gone: bool = False  # past its preStop: no process may start


class Kubelet:
    """``start()`` it after the API stand-in, ``stop()`` it before (every replica goes)."""

    def __init__(
        self,
        api: ks.ApiStandIn,
        *,
        pull_seconds: float = 0.0,
        load_seconds: float = 0.0,
        namespace: str | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace or api.namespaces[0]
        self.pull_seconds = pull_seconds
        self.load_seconds = load_seconds
        self._pods: dict[str, _Pod] = {}
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._loop = threading.Thread(target=self._run, name="kubelet", daemon=True)
        # A block of loopback addresses of our own: parallel runs do not meet on a port.
        block = f"127.{random.randint(100, 250)}.{random.randint(0, 255)}"
        self._addresses = (f"{block}.{n}" for n in range(2, 255))
        self.started: list[str] = []  # pod names, in the order their replicas started
        self.finished: list[str] = []  # pod names whose replicas exited after SIGTERM

    def start(self) -> Kubelet:
        self._loop.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        self._loop.join(10)
        with self._lock:
            pods = list(self._pods.values())
        for pod in pods:
            if pod.process is not None and pod.process.poll() is None:
                pod.process.kill()
                pod.process.wait(10)

    # -- the loop: controller step, then the kubelet's --------------------------------------
    def _run(self) -> None:
        version = 0
        while not self._halt.is_set():
            version = self.api.wait_for_change(version, timeout=0.5)
            if self._halt.is_set():
                return
            for dep in self.api.list("deployments", self.namespace):
                with contextlib.suppress(KeyError):  # deleted meanwhile
                    self.api.sync_pods(dep["metadata"]["name"], self.namespace)
            pods = {p["metadata"]["name"]: p for p in self.api.list("pods", self.namespace)}
            with self._lock:
                known = dict(self._pods)
            for name, pod in pods.items():
                if name not in known and not pod["metadata"].get("deletionTimestamp"):
                    self._admit(pod)
            for name, mine in known.items():
                live = pods.get(name)
                going = live is None or bool(live["metadata"].get("deletionTimestamp"))
                if going and not mine.stopping:
                    mine.stopping = True
                    threading.Thread(target=self._terminate, args=(mine,), daemon=True).start()

    def _admit(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        mine = _Pod(name, self._free_address(), pod.get("spec") or {})
        with self._lock:
            self._pods[name] = mine
        generation = (pod["metadata"].get("labels") or {}).get(TEMPLATE_HASH_LABEL, "")
        threading.Thread(
            target=self._start, args=(mine, generation), name=f"kubelet-{name}", daemon=True
        ).start()

    def _free_address(self) -> str:
        for address in self._addresses:
            with socket.socket() as s:
                try:
                    s.bind((address, HTTP_PORT))
                except OSError:
                    continue
            return address
        raise RuntimeError("no free loopback address left for a replica")

    # -- one pod's life -------------------------------------------------------------------
    def _start(self, pod: _Pod, generation: str) -> None:
        try:
            if self.pull_seconds:
                self._pull(pod)
            argv = [pod.address, str(HTTP_PORT), pod.name, generation]
            with self._lock:
                if pod.gone:
                    return  # deleted while pulling: nothing to start
                pod.process = subprocess.Popen(
                    [sys.executable, "-m", "testing.replica", *argv], stdout=subprocess.DEVNULL
                )
            if self.load_seconds:
                self._set(pod, ks.status_starting())
                self._halt.wait(self.load_seconds)
            wait_until(lambda: pod.gone or _answers(pod.address), READY_TIMEOUT_S, interval=0.05)
            if pod.stopping:
                return
            with self._lock:
                self.started.append(pod.name)
            self._set(pod, {**ks.status_ready(), "podIP": pod.address})
        except KeyError:
            pass  # the pod went while starting; _terminate stops what was started

    def _pull(self, pod: _Pod) -> None:
        """The init container: progress lines over ``pull_seconds``, then it exits 0."""
        self._set(pod, ks.status_pulling())
        steps = 4
        for step in range(steps + 1):
            done = PULL_BYTES * step // steps
            report = Progress("pulling", step, steps, done, PULL_BYTES, rate=1e6, eta_s=1.0)
            if step == steps:
                report = Progress("pulled", steps, steps, PULL_BYTES, PULL_BYTES, eta_s=0.0)
            self.api.append_log(pod.name, PULL_CONTAINER, log_line(report))
            if step < steps:
                self._halt.wait(self.pull_seconds / steps)

    def _set(self, pod: _Pod, status: dict[str, Any]) -> None:
        if not pod.stopping:
            self.api.set_pod_status(pod.name, status, self.namespace)

    def _terminate(self, pod: _Pod) -> None:
        """preStop, SIGTERM, the grace period, SIGKILL; then the pod is gone."""
        spec = pod.spec
        self._halt.wait(_prestop_seconds(spec))
        with self._lock:
            pod.gone = True
            process = pod.process
        if process is not None and process.poll() is None:
            process.terminate()
            grace = float(spec.get("terminationGracePeriodSeconds") or 30)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        with self._lock:
            self.finished.append(pod.name)
            self._pods.pop(pod.name, None)
        self.api.remove_pod(pod.name, self.namespace)


def _prestop_seconds(spec: dict[str, Any]) -> float:
    for container in spec.get("containers") or []:
        command = (((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get(
            "command"
        ) or []
        if len(command) == 2 and command[0] == "sleep":
            return float(command[1])
    return 0.0


def _answers(address: str) -> bool:
    """The readiness probe."""
    try:
        with urllib.request.urlopen(f"http://{address}:{HTTP_PORT}/v2/health/ready", timeout=1):
            return True
    except OSError:
        return False
