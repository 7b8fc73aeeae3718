"""The local runtime: each replica is ``openeas processor run <processor> …`` as a process
on free loopback ports. Used by ``openeas up`` (laptop, CI), no cluster and no GPU needed.

Each replica has a supervisor task: start the process (its own process group, output to a
log file in the data dir), poll the processor's readiness path, restart with exponential
backoff when it exits, and stop for good on an exit code that restarting cannot fix (bad
flags, bad model repository). Every state change calls ``notify`` so the reconciler acts
on it at once. Model repositories are pulled into one cache in the data dir, so replicas
of a service (and restarts) pull once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import signal
import socket
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from contract.progress import WARMED_UP, Progress
from controlplane.model.eas_spec import RollingStrategy
from controlplane.runtime.base import (
    PROCESS_STARTING,
    DesiredReplicaSet,
    Notify,
    Observation,
    ReplicaState,
    ReplicaStatus,
    ReplicaSummary,
    probed_state,
)
from controlplane.runtime.doorbell import Bell
from controlplane.runtime.proc_cpu import CpuRates
from processors import exits, progress, registry, repository
from processors.base import READY_FILE_ENV, Ports, ReplicaPlan, die_with

log = logging.getLogger(__name__)

PERMANENT_EXITS = exits.PERMANENT
TAIL_LINES = 12
MAX_BACKOFF = 60.0
STOP_GRACE = 15.0
PROGRESS_NOTIFY = 1.0  # seconds between status writes for one pulling replica
START_MARKER = "--- openeas: start #"  # opens each start's lines in a replica's log
FOLLOW_POLL_S = 0.2  # how often a followed log file is read for what was added


@dataclass
class Replica:
    service: str
    number: int
    desired: DesiredReplicaSet
    log_path: Path
    state: ReplicaState = "Pending"
    base_url: str | None = None  # of the current process; an endpoint only while ready
    metrics_url: str | None = None  # its metrics port (the autoscaler's queue time)
    grpc_url: str | None = None  # its gRPC port (the gateway's gRPC door)
    restarts: int = 0
    reason: str = "Starting"
    message: str = ""
    permanent: bool = False
    progress: Progress | None = None
    stopping: bool = False
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"{self.service}-{self.number}"

    def status(self) -> ReplicaStatus:
        return ReplicaStatus(
            name=self.name,
            template_hash=self.desired.template_hash,
            state="Terminating" if self.stopping else self.state,
            endpoint=self.base_url if self.state == "Running" and not self.stopping else None,
            restarts=self.restarts,
            reason=self.reason,
            message=self.message,
            permanent=self.permanent,
            metrics=self.metrics_url if self.state == "Running" and not self.stopping else None,
            progress=self.progress if self._progress_shown() else None,
            grpc_endpoint=self.grpc_url if self.state == "Running" and not self.stopping else None,
        )

    def _progress_shown(self) -> bool:
        # A pending replica's pull or warm-up; a ready one keeps only its warm-up's result
        # (how long it took, for the cold-start breakdown).
        if self.state == "Pending":
            return True
        return self.progress is not None and self.progress.phase == WARMED_UP

    @property
    def progress_path(self) -> Path:
        return self.log_path.with_suffix(".progress")


def log_folder(data_dir: Path, service: str) -> Path:
    """Where a service's replicas write their output, ``<number>.log`` each."""
    return data_dir / "logs" / service


class LocalLogs:
    """Replica logs from the data dir: any control plane sharing it can serve them."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    async def logs(
        self, service: str, replica: int | None, tail: int, *, previous: bool = False
    ) -> str:
        return await asyncio.to_thread(self._read, service, replica, tail, previous)

    async def follow(self, service: str, replica: int | None, tail: int) -> AsyncIterator[str]:
        """The last ``tail`` lines, then what the replica writes, until the caller stops."""
        path = await asyncio.to_thread(self._file, service, replica)
        with path.open("rb") as f:
            lines = deque(f, maxlen=tail)
            yield b"".join(lines).decode("utf-8", "replace")
            while True:
                chunk = f.read(65536)
                if chunk:
                    yield chunk.decode("utf-8", "replace")
                else:
                    await asyncio.sleep(FOLLOW_POLL_S)

    def _file(self, service: str, replica: int | None) -> Path:
        folder = log_folder(self.data_dir, service)
        files = sorted(
            (p for p in folder.glob("*.log") if p.stem.isdigit()), key=lambda p: int(p.stem)
        )
        if replica is not None:
            files = [f for f in files if f.stem == str(replica)]
        if not files:
            raise FileNotFoundError(f"no logs for replica {replica} of {service!r}")
        return files[-1]

    def _read(self, service: str, replica: int | None, tail: int, previous: bool) -> str:
        path = self._file(service, replica)
        with path.open(errors="replace") as f:
            if not previous:
                return "".join(deque(f, maxlen=tail))
            runs: list[list[str]] = [[]]
            for line in f:  # each start of the replica's process opens with its marker
                if line.startswith(START_MARKER) and runs[-1]:
                    runs.append([])
                runs[-1].append(line)
        if len(runs) < 2:
            raise FileNotFoundError(f"replica {path.stem} of {service!r} has not restarted")
        return "".join(runs[-2][-tail:])


class LocalRuntime:
    def __init__(
        self,
        data_dir: Path,
        notify: Notify,
        *,
        host: str = "127.0.0.1",
        probe_interval: float = 0.05,
        ready_probe_interval: float = 1.0,
        rung_probe_interval: float = 0.5,
        base_backoff: float = 1.0,
        drain_seconds: float = 2.0,
    ) -> None:
        self.data_dir = data_dir
        self.notify = notify
        self.host = host
        # A starting replica is probed often, so Running is noticed within tens of ms of
        # Triton being ready (a probe is one small local HTTP request); a ready one, rarely.
        self.probe_interval = probe_interval
        self.ready_probe_interval = max(probe_interval, ready_probe_interval)
        # One that rings its doorbell (``ReplicaPlan.rings``) says when to look: it is probed
        # besides only this often while starting (a lost ring costs no more than this).
        self.rung_probe_interval = max(probe_interval, rung_probe_interval)
        self.base_backoff = base_backoff
        self.drain_seconds = drain_seconds
        self._replicas: dict[str, list[Replica]] = {}
        self._cpu = CpuRates()
        self._numbers: dict[str, int] = {}
        self._http: aiohttp.ClientSession | None = None

    # -- Runtime protocol -----------------------------------------------------------------
    async def claim(self, installation: str) -> str | None:
        """Always granted: every replica here is a process this runtime started."""
        return None

    async def warn(self, reason: str, message: str) -> None:
        log.warning("%s: %s", reason, message)

    async def apply(self, desired: DesiredReplicaSet) -> None:
        live = [r for r in self._replicas.get(desired.service, []) if not r.stopping]

        def is_old(r: Replica) -> bool:
            return r.desired.template_hash != desired.template_hash or r.name in desired.retire

        current = [r for r in live if not is_old(r)]
        old = [r for r in live if is_old(r)]
        surge, unavailable = rollout(desired)
        missing = desired.replicas - len(current)
        if old:  # a rollout: at most surge replicas above the count at any time
            missing = min(missing, desired.replicas + surge - len(live))
        for _ in range(missing):
            current.append(self._start(desired))
        # Scale down: unready replicas first, then the newest.
        surplus = sorted(current, key=lambda r: (r.state == "Running", -r.number))
        for replica in surplus[: max(0, len(current) - desired.replicas)]:
            self._stop(replica)
        # Rolling update: retire an old replica only while enough others stay ready.
        ready_current = sum(r.state == "Running" for r in current[: desired.replicas])
        ready_old = [r for r in old if r.state == "Running"]
        for replica in old:
            if replica.state != "Running":
                self._stop(replica)
        spare = ready_current + len(ready_old) - (desired.replicas - unavailable)
        for replica in ready_old[: max(0, spare)] if desired.replicas else ready_old:
            self._stop(replica)

    async def observe(self, service: str) -> Observation:
        return Observation([r.status() for r in self._replicas.get(service, [])])

    async def cpu_cores(self, service: str) -> list[float]:
        pids = {
            r.name: r.process.pid
            for r in self._replicas.get(service, [])
            if r.state == "Running" and not r.stopping and r.process is not None
        }
        return await asyncio.to_thread(self._cpu.cores, service, pids)

    async def delete(self, service: str) -> bool:
        for replica in self._replicas.get(service, []):
            self._stop(replica)
        return not self._replicas.get(service)

    async def services(self) -> set[str]:
        return {name for name, replicas in self._replicas.items() if replicas}

    async def summary(self) -> dict[str, ReplicaSummary]:
        out = {}
        for name, replicas in self._replicas.items():
            live = [r for r in replicas if not r.stopping]
            if replicas:
                ready = sum(r.state == "Running" for r in live)
                templates = frozenset(r.desired.template_hash for r in live)
                out[name] = ReplicaSummary(len(live), ready, templates)
        return out

    async def logs(self, service: str, replica: int | None, tail: int) -> str:
        return await LocalLogs(self.data_dir).logs(service, replica, tail)

    async def close(self) -> None:
        """Stop every replica and wait for them: nothing outlives the runtime."""
        tasks = []
        for replicas in self._replicas.values():
            for replica in list(replicas):
                self._stop(replica, drain=0)  # shutting down: no gateway left to drain
                if replica.task is not None:
                    tasks.append(replica.task)
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()

    # -- replicas -------------------------------------------------------------------------
    def _start(self, desired: DesiredReplicaSet) -> Replica:
        folder = log_folder(self.data_dir, desired.service)
        if desired.service not in self._numbers:  # continue after the last run's replicas
            folder.mkdir(parents=True, exist_ok=True)
            self._numbers[desired.service] = 1 + max(
                (int(p.stem) for p in folder.glob("*.log") if p.stem.isdigit()), default=-1
            )
        number = self._numbers[desired.service]
        self._numbers[desired.service] = number + 1
        log_path = folder / f"{number}.log"
        replica = Replica(desired.service, number, desired, log_path)
        self._replicas.setdefault(desired.service, []).append(replica)
        replica.task = asyncio.create_task(self._supervise(replica))
        return replica

    def _stop(self, replica: Replica, drain: float | None = None) -> None:
        """Take the replica out of service now (observe shows it Terminating, without an
        endpoint, so the route table drops it) and signal it after the drain period, by
        which time the gateway has stopped sending it requests."""
        if replica.stopping:
            return
        replica.stopping = True
        self.notify(replica.service)
        if replica.process is not None and replica.process.returncode is None:
            delay = self.drain_seconds if drain is None else drain
            asyncio.get_running_loop().call_later(delay, self._terminate, replica)
        elif replica.task is not None:
            replica.task.cancel()  # waiting on backoff or failed for good: nothing to stop

    @staticmethod
    def _terminate(replica: Replica) -> None:
        process = replica.process
        if process is not None and process.returncode is None:
            # The processor alone: it forwards to tritonserver, which stops its own
            # backend stubs; signalling the whole group makes Triton wait for dead stubs.
            # EAS's ``rpc.enable_sigterm: false`` asks for no signal: the grace period, then
            # the kill.
            if replica.desired.enable_sigterm is not False:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
            # Whatever of the group still runs after the grace period goes at once (a
            # replica ignoring SIGTERM, or a stub holding GPU memory).
            grace = stop_grace(replica.desired)
            asyncio.get_running_loop().call_later(grace, _kill_group, process)

    async def _supervise(self, replica: Replica) -> None:
        try:
            while not replica.stopping:
                code = await self._run_once(replica)
                if replica.stopping:
                    break
                tail = _tail(replica.log_path)
                replica.state = "CrashLoopBackOff"
                replica.message = f"exited with code {code}" + (f":\n{tail}" if tail else "")
                if code in PERMANENT_EXITS:
                    replica.state, replica.permanent = "Failed", True
                    replica.reason = PERMANENT_EXITS[code]
                    self.notify(replica.service)
                    await asyncio.Event().wait()  # stay Failed until stopped
                replica.restarts += 1
                replica.reason = "CrashLoopBackOff"
                self.notify(replica.service)
                await asyncio.sleep(
                    min(MAX_BACKOFF, self.base_backoff * 2 ** (replica.restarts - 1))
                )
        except asyncio.CancelledError:
            pass
        finally:
            await self._kill(replica)
            replicas = self._replicas.get(replica.service, [])
            if replica in replicas:
                replicas.remove(replica)
            self.notify(replica.service)

    async def _run_once(self, replica: Replica) -> int:
        http, grpc, metrics = _free_ports(3, self.host)
        ports = Ports(http=http, grpc=grpc, metrics=metrics, host=self.host)
        try:
            plan = await self._plan(replica, ports)
        except repository.PullFailed as e:
            with replica.log_path.open("a") as out:
                out.write(f"openeas: mount pull failed: {e}\n")
            return e.exit_code
        env = dict(os.environ, **plan.env)
        env["OPENEAS_MODEL_CACHE"] = str(self.data_dir / "models")
        env["PYTHONUNBUFFERED"] = "1"
        env[progress.ENV_FILE] = str(replica.progress_path)
        replica.progress_path.unlink(missing_ok=True)  # a restart pulls (or skips) anew
        replica.progress = None
        gate = replica.log_path.with_suffix(".ready") if plan.warms_up else None
        if gate is not None:
            gate.unlink(missing_ok=True)  # a restart warms up anew
            env[READY_FILE_ENV] = str(gate)
        bell = Bell() if plan.rings else None
        if bell is not None:
            env.update(bell.env())
        replica.state = "Pending"
        replica.reason = PROCESS_STARTING if bell is not None else "Starting"
        http = plan.http_port
        replica.base_url = f"http://{self.host}:{http}"
        replica.metrics_url = f"http://{self.host}:{metrics}"
        replica.grpc_url = f"http://{self.host}:{grpc}"
        try:
            with replica.log_path.open("ab") as out:
                out.write(f"{START_MARKER}{replica.restarts} on port {http}\n".encode())
                out.flush()
                replica.process = await asyncio.create_subprocess_exec(
                    *plan.command,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    env=env,
                    pass_fds=(bell.child_fd,) if bell is not None else (),
                    # No orphan even if we are SIGKILLed. Its own process group, so that
                    # stopping it stops tritonserver too; but our session, so that a replica
                    # shares its scheduler autogroup with the process that started it (a
                    # yield of the CPU cedes the core only within an autogroup; a new
                    # session is one of its own).
                    preexec_fn=die_with(os.getpid(), own_group=True),
                )
        except BaseException:
            if bell is not None:
                bell.close()
            raise
        if bell is not None:
            bell.spawned()
        self.notify(replica.service)
        probe = asyncio.create_task(
            self._probe(replica, replica.base_url + plan.readiness_path, gate, bell)
        )
        try:
            return await replica.process.wait()
        finally:
            probe.cancel()
            if bell is not None:
                bell.close()
            # What it leaves in its group goes with it (a backend stub holds GPU memory).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(replica.process.pid, signal.SIGKILL)

    async def _plan(self, replica: Replica, ports: Ports) -> ReplicaPlan:
        """The processor's plan; a Triton container's is the triton processor's with the
        container's env. Any other container runs its command as a process here (the
        API refused it unless its program is on the PATH), on its own port, with a folder
        per replica standing in for each mount path, OSS mounts pulled into it."""
        desired = replica.desired
        image = desired.image
        if image is None or image.triton:
            plan = registry.get(desired.processor).plan(
                desired.params, ports, desired.oss_endpoint, None, warm_up=desired.warm_up
            )
            if image is not None:
                plan = dataclasses.replace(plan, env={**dict(image.env), **plan.env})
            return plan
        folders = await asyncio.to_thread(self._mount_folders, replica)
        argv = [standing_in(word, folders) for word in image.argv]
        env = {k: standing_in(v, folders) for k, v in image.env}
        port = image.port or ports.http
        check = dict(image.checks).get("readiness") or {}
        get = check.get("http_get")
        path = str(get.get("path", "/")) if isinstance(get, dict) else "/"
        return ReplicaPlan(command=argv, env=env, http_port=port, readiness_path=path)

    def _mount_folders(self, replica: Replica) -> dict[str, Path]:
        """mount path -> this replica's folder for it, OSS mounts pulled (cached)."""
        base = self.data_dir / "mounts" / replica.service / str(replica.number)
        folders: dict[str, Path] = {}
        for i, mount in enumerate(replica.desired.mounts):
            folder = base / str(i)
            folder.mkdir(parents=True, exist_ok=True)
            if mount.kind == "oss":
                repository.pull(mount.source, folder, endpoint=replica.desired.oss_endpoint)
            folders[mount.path.rstrip("/") or "/"] = folder
        return folders

    async def _probe(
        self, replica: Replica, url: str, gate: Path | None, bell: Bell | None
    ) -> None:
        """Follow readiness: Pending ↔ Running, notifying on every flip. With warm-up
        requests, ready also waits for the ``gate`` file the replica creates once they are
        replayed (Triton is ready before that). With a ``bell``, a starting replica is probed
        when it rings (and every ``rung_probe_interval`` besides)."""
        if self._http is None:
            # No keep-alive: Triton waits for open HTTP connections before it exits.
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True),
                timeout=aiohttp.ClientTimeout(total=2),
            )
        watch = _ProgressWatch(replica.progress_path)
        plain = replica.desired.image is not None and not replica.desired.image.triton
        misses = 0  # probes failed in a row
        starting = self.rung_probe_interval if bell is not None else self.probe_interval
        while True:
            if bell is not None and bell.server_started and replica.reason == PROCESS_STARTING:
                replica.reason = "Starting"  # its server loads: the breakdown's Triton load
                self.notify(replica.service)
            try:
                async with self._http.get(url) as response:
                    # A plain container is ready once it answers at all (a 404 on "/").
                    ready = response.status == 200 or (plain and response.status < 500)
            except (aiohttp.ClientError, TimeoutError):
                ready = False
            if ready and gate is not None and not gate.exists():
                ready = False
            misses = 0 if ready else misses + 1
            state = probed_state(replica.state, ready, misses)
            if state != replica.state:
                if gate is not None and ready:
                    watch.changed(replica, force=True)  # its last word: the warm-up's duration
                replica.state = state
                replica.reason = "" if ready else "NotReady"
                self.notify(replica.service)
            elif state == "Pending" and watch.changed(replica):
                self.notify(replica.service)
            # A ready replica is probed at its own pace, misses too (as Kubernetes does).
            if state == "Running":
                await asyncio.sleep(self.ready_probe_interval)
            elif bell is not None:
                await bell.wait(starting)
            else:
                await asyncio.sleep(self.probe_interval)

    async def _kill(self, replica: Replica) -> None:
        process = replica.process
        if process is None or process.returncode is not None:
            return
        self._terminate(replica)
        try:
            await asyncio.wait_for(process.wait(), stop_grace(replica.desired))
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


def standing_in(word: str, folders: dict[str, Path]) -> str:
    """``word`` with a mount path it names (alone, or before ``/`` or after ``=``)
    replaced by the replica's folder for it."""
    for mount, folder in sorted(folders.items(), key=lambda m: -len(m[0])):
        word = re.sub(rf"(?<![\w/.-]){re.escape(mount)}(?=/|$|\s)", str(folder), word)
    return word


def stop_grace(desired: DesiredReplicaSet) -> float:
    """Seconds from SIGTERM to the kill: ``metadata.eas.termination_grace_period``."""
    grace = desired.termination_grace_seconds
    return STOP_GRACE if grace is None else float(grace)


def rollout(desired: DesiredReplicaSet) -> tuple[int, int]:
    """(surge, unavailable) in replicas during a rollout. Without
    ``metadata.rolling_strategy`` every new replica starts at once and an old one goes
    only when a new one is ready (no capacity lost)."""
    if desired.rolling is None:
        return desired.replicas, 0
    surge, unavailable = RollingStrategy(
        max_surge=desired.rolling[0], max_unavailable=desired.rolling[1]
    ).counts(desired.replicas)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # as Kubernetes: a percentage rounding both to 0 still rolls
    return surge, unavailable


def _kill_group(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


class _ProgressWatch:
    """Reads a pending replica's progress file when it changed, and says when the status
    is worth writing: a new phase at once, new numbers at most every PROGRESS_NOTIFY s."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime = 0
        self._notified = float("-inf")

    def changed(self, replica: Replica, *, force: bool = False) -> bool:
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return False  # no pull (a local repository), or not started yet
        if mtime == self._mtime:
            return False
        now = asyncio.get_running_loop().time()
        seen = progress.read_file(self.path)
        old = replica.progress
        if seen is None:
            return False
        if seen.phase == "pulled":  # pulled, not ready: the server is loading the models
            seen = dataclasses.replace(seen, phase="loading")
        new_phase = old is None or old.phase != seen.phase
        if not (new_phase or force) and now - self._notified < PROGRESS_NOTIFY:
            return False  # read again next probe: the newest numbers win
        self._mtime = mtime
        self._notified = now
        replica.progress = seen
        return True


def _free_ports(count: int, host: str) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        with path.open(errors="replace") as f:
            return "".join(deque(f, maxlen=lines)).strip()
    except OSError:
        return ""
