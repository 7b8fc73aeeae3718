"""Benchmark of the time ``eascmd create`` takes to bring a service to Running, against the
time Triton itself takes to start on the same model repository, in one run.

Run by hand (``python bench/deploy.py``): it starts ``openeas up`` (its own data dir and
``HOME``, so the eascmd profile it writes is used) and, ``--repeat`` times, interleaved:

1. Triton's own start: ``tritonserver`` on ``examples/models`` (every model loaded, as the
   replica does), from launch to the first 200 of ``/v2/health/ready`` (probed every 5 ms);
2. ``eascmd create`` of a service on the same repository, from launch to its exit (it waits
   until the service is Running), then ``eascmd delete``.

It prints the median of each and the overhead (2 - 1): what the platform adds — the CLI, the
API, the reconciler, the local runtime's process start and readiness probing, status writes,
eascmd noticing Running. ``--base DIR`` runs the same against another checkout's code (its own
``openeas up``), for before/after figures in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "examples" / "models"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def cpu_seconds(pid: int, *, descendants: bool = True, user_only: bool = False) -> float:
    """User + system CPU (``user_only``: user) of a process (all its threads) and, unless
    told otherwise, its descendants (nginx's worker, gateway workers), from ``/proc``: a
    steadier figure than throughput on a shared machine."""
    ticks, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + (0 if user_only else int(fields[12]))  # utime, stime
            if descendants:
                for task in Path(f"/proc/{p}/task").iterdir():
                    todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended meanwhile
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Meter:
    """Whose CPU one target's row counts, as Triton's and as its proxy's. ``triton`` and
    ``proxy`` are process trees (nginx's master and workers, the gateway's workers).
    ``openeas up`` (``platform``) holds its replicas as descendants: they are Triton, and the
    process itself, the gateway beside the control plane, is the proxy unless ``proxy``
    names another in front of those replicas (nginx, for a comparison on the same Triton)."""

    triton: int | None = None
    proxy: int | None = None
    platform: int | None = None

    def seconds(self) -> tuple[float, float, float]:
        """CPU seconds so far of Triton, of the proxy, and the user part of the proxy's
        (where proxies differ: in front of Triton their system time is about the same)."""
        if self.platform is not None:
            own = cpu_seconds(self.platform, descendants=False)
            triton = cpu_seconds(self.platform) - own
            if self.proxy is None:
                return triton, own, cpu_seconds(self.platform, descendants=False, user_only=True)
        else:
            triton = cpu_seconds(self.triton) if self.triton is not None else 0.0
        if self.proxy is None:
            return triton, 0.0, 0.0
        return triton, cpu_seconds(self.proxy), cpu_seconds(self.proxy, user_only=True)


# The first words of a crash in a process's log: a C++ exception nothing caught, Triton's
# own handler of a fatal signal, the kernel's word through a shell.
CRASH_SIGNS = ("terminate called", "Signal (", "Segmentation fault", "core dumped", "Killed")


def restarts(log: str, marker: str) -> list[str]:
    """For each start of a replica after its first (a line beginning with ``marker``), the
    first line of the run before it that names a crash, or "" (it exited without one)."""
    why: list[str] = []
    run: list[str] | None = None  # the lines of the current start (None: before any)
    for line in log.splitlines():
        if line.startswith(marker):
            if run is not None:
                why.append(next((x.strip() for x in run if x.startswith(CRASH_SIGNS)), ""))
            run = []
        elif run is not None:
            run.append(line)
    return why


def replica_restarts(tmp: Path) -> list[str]:
    """A line per replica of the platforms run under ``tmp`` (``tmp/<name>``, as
    :class:`Platform`) that started more than once, saying why: a failed bench row whose
    replica crashed is the replica's failure, not the gateway's."""
    sys.path.insert(0, str(ROOT))
    from controlplane.runtime.local import START_MARKER

    lines = []
    for log in sorted(tmp.glob("*/data/logs/*/*.log")):
        why = restarts(log.read_text(errors="replace"), START_MARKER)
        if why:
            counted = Counter(reason or "it exited (no crash in its log)" for reason in why)
            said = "; ".join(f"{r} (x{n})" if n > 1 else r for r, n in counted.items())
            name = f"{log.relative_to(tmp).parts[0]}'s replica {log.parent.name}/{log.stem}"
            lines.append(f"{name} started again {len(why)} time(s): {said}")
    return lines


def tritonserver(*extra: str) -> tuple[list[str], dict[str, str], int]:
    """Command line, environment and HTTP port of tritonserver on the example models, on
    free loopback ports (the benchmarks' direct baseline)."""
    sys.path.insert(0, str(ROOT))
    from processors.triton import binary

    server = binary.locate()
    port = free_port()
    argv = [
        str(server.binary),
        f"--model-repository={MODELS}",
        f"--http-port={port}",
        f"--grpc-port={free_port()}",
        f"--metrics-port={free_port()}",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1",
        *extra,
        *server.args,
    ]
    return argv, server.environ(os.environ), port


def triton_start(tmp: Path) -> float:
    """Seconds from launching tritonserver to its first ready answer."""
    argv, env, port = tritonserver()
    with (tmp / "triton.log").open("ab") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            while not answers(f"http://127.0.0.1:{port}/v2/health/ready", 0.5):
                if proc.poll() is not None:
                    raise RuntimeError(f"tritonserver exited with {proc.returncode}")
                time.sleep(0.005)
            return time.perf_counter() - started
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


class Platform:
    """``openeas up`` from one checkout, and ``eascmd`` from the same."""

    def __init__(self, tree: Path, tmp: Path, cpus: str | None = None) -> None:
        self.tree = tree
        self.cpus = cpus  # pin it (and so the replicas it starts) to these CPUs
        self.tmp = tmp
        self.port = free_port()
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("EAS_", "OPENEAS_ADMIN"))
        }
        self.env.update(
            HOME=str(tmp / "home"), OPENEAS_DATA_DIR=str(tmp / "data"), PYTHONPATH=str(tree)
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self, module: str, *args: str) -> list[str]:
        return [sys.executable, "-c", f"import sys; from {module} import main; sys.exit(main())"]

    def start(self) -> None:
        log = (self.tmp / "up.log").open("ab")
        argv = [*self.command("openeas.cli"), "up", "--port", str(self.port)]
        if "--grpc-port" in (self.tree / "openeas" / "up.py").read_text():
            argv += ["--grpc-port", "0"]  # a free one: several platforms run side by side
        if self.cpus is not None:
            argv = ["taskset", "-c", self.cpus, *argv]
        self.proc = subprocess.Popen(argv, env=self.env, cwd=self.tmp, stdout=log, stderr=log)
        deadline = time.monotonic() + 90
        while not answers(f"http://127.0.0.1:{self.port}/readyz"):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError((self.tmp / "up.log").read_text()[-2000:])
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        """The platform's process (its replicas are its descendants)."""
        assert self.proc is not None, "start() first"
        return self.proc.pid

    def eascmd(self, *args: str) -> str:
        argv = [*self.command("eascmd.cli"), *args]
        done = subprocess.run(argv, env=self.env, cwd=self.tmp, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"eascmd {' '.join(args)}:\n{done.stdout}{done.stderr}")
        return done.stdout

    def create(self, name: str, token: str | None = None) -> float:
        """Seconds of ``eascmd create`` of a service on ``examples/models`` (until Running)."""
        spec = {
            "name": name,
            "processor": "triton",
            "processor_params": [f"--model-repository={MODELS}"],
            "metadata": {"instance": 1, "cpu": 1, "memory": 1000},
        }
        if token is not None:
            spec["token"] = token
        config = self.tmp / f"{name}.json"
        config.write_text(json.dumps(spec))
        started = time.perf_counter()
        self.eascmd("create", str(config))
        return time.perf_counter() - started

    def replica_port(self, service: str) -> int:
        """The HTTP port of ``service``'s newest replica as it last started (the local
        runtime's log of it opens each start with a line naming the port)."""
        sys.path.insert(0, str(ROOT))
        from controlplane.runtime.local import START_MARKER, log_folder

        logs = [p for p in log_folder(self.tmp / "data", service).glob("*.log") if p.stem.isdigit()]
        log = max(logs, key=lambda p: int(p.stem), default=None)
        text = log.read_text(errors="replace") if log is not None else ""
        starts = re.findall(rf"^{re.escape(START_MARKER)}\d+ on port (\d+)$", text, re.M)
        if not starts:
            raise RuntimeError(f"{service}: no start of its replica logged under {self.tmp}")
        return int(starts[-1])

    def deploy(self, name: str) -> float:
        """Seconds of ``eascmd create`` (until Running), then the service is deleted."""
        seconds = self.create(name)
        self.eascmd("delete", name)
        return seconds

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", type=Path, help="another checkout to measure beside this one")
    args = ap.parse_args()
    trees = {"this": ROOT} | ({"base": args.base.resolve()} if args.base else {})
    with tempfile.TemporaryDirectory(prefix="openeas-bench-") as tmpdir:
        tmp = Path(tmpdir)
        platforms = {}
        try:
            for name, tree in trees.items():
                (tmp / name).mkdir()
                platforms[name] = Platform(tree, tmp / name)
                platforms[name].start()
            own: list[float] = []
            deploys: dict[str, list[float]] = {name: [] for name in trees}
            for i in range(args.repeat):
                own.append(triton_start(tmp))
                for name, platform in platforms.items():
                    deploys[name].append(platform.deploy(f"deploy_bench_{i}"))
                print(
                    f"round {i + 1}: triton {own[-1]:.2f} s, "
                    + ", ".join(f"{n} create→Running {d[-1]:.2f} s" for n, d in deploys.items()),
                    flush=True,
                )
        finally:
            for platform in platforms.values():
                platform.stop()
        t = statistics.median(own)
        print(f"\nTriton's own start (launch → ready), median of {args.repeat}: {t:.2f} s")
        for name, seconds in deploys.items():
            d = statistics.median(seconds)
            print(f"{name}: eascmd create → Running {d:.2f} s, overhead over Triton {d - t:+.2f} s")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
