"""The local runtime with real processes (a small stand-in replica instead of Triton, so
this runs in seconds): readiness, crash restarts with backoff, permanent failures, scaling,
rolling updates that never drop to zero ready replicas, logs, and no orphans."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from contract.progress import Progress
from controlplane.runtime import local as local_module
from controlplane.runtime.base import (
    DesiredReplicaSet,
    ReplicaState,
    Resources,
    probed_state,
)
from controlplane.runtime.local import LocalRuntime
from processors import progress, registry
from processors.base import Ports, Processor, ReplicaPlan
from testing.waiting import wait_until_async
from tests.fixtures_triton import is_alive

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "fake_replica.py"


def fake_plan(
    params: Sequence[str],
    ports: Ports,
    _endpoint: str | None,
    _model_dir: str | None,
    /,
    *,
    warm_up: str | None = None,
    warm_up_dir: str | None = None,
) -> ReplicaPlan:
    return ReplicaPlan(
        command=[sys.executable, str(SCRIPT), str(ports.http), params[0]],
        http_port=ports.http,
        warms_up=warm_up is not None,
        rings=params[0].startswith(("ring-", "mute-")),
    )


@pytest.fixture(autouse=True)
def fake_processor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._LOADED, "fake", Processor("fake", validate=list, plan=fake_plan))


def want(replicas: int = 1, behaviour: str = "serve", template: str = "t1") -> DesiredReplicaSet:
    return DesiredReplicaSet(
        service="svc",
        object_name="svc",
        uid="u",
        generation=1,
        replicas=replicas,
        processor="fake",
        params=(behaviour,),
        oss_endpoint=None,
        resources=Resources(cpu=1, gpu=0, memory_mb=100),
        template_hash=template,
    )


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[LocalRuntime]:
    rt = LocalRuntime(
        tmp_path, lambda _: None, probe_interval=0.05, base_backoff=0.2, drain_seconds=0.1
    )
    yield rt
    await rt.close()


async def until(check: Callable[[], Awaitable[object]], timeout: float = 20.0) -> None:
    await wait_until_async(check, timeout, interval=0.05)


async def states(rt: LocalRuntime) -> list[str]:
    return [r.state for r in (await rt.observe("svc")).replicas]


def states_are(rt: LocalRuntime, expected: list[str]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await states(rt) == expected

    return check


def pids(rt: LocalRuntime) -> list[int]:
    return [r.process.pid for r in rt._replicas.get("svc", []) if r.process is not None]


async def test_replica_becomes_ready_with_an_endpoint(runtime: LocalRuntime) -> None:
    notified: list[str] = []
    runtime.notify = notified.append
    await runtime.apply(want())
    await runtime.apply(want())  # idempotent: still one replica
    assert len((await runtime.observe("svc")).replicas) == 1
    await until(states_are(runtime, ["Running"]))
    (replica,) = (await runtime.observe("svc")).replicas
    assert replica.endpoint is not None and replica.endpoint.startswith("http://127.0.0.1:")
    assert replica.grpc_endpoint is not None and replica.grpc_endpoint.startswith(
        "http://127.0.0.1:"
    )
    assert replica.grpc_endpoint != replica.endpoint
    assert "svc" in notified
    assert "fake replica on" in await runtime.logs("svc", None, 10)


async def test_a_replica_leads_its_own_group_in_our_session(runtime: LocalRuntime) -> None:
    """Its own process group (stopping it stops what it started), but not its own session:
    a session is a scheduler autogroup, across which the gateway's yield cedes nothing."""
    await runtime.apply(want())
    (replica,) = await wait_until_async(lambda: pids(runtime))
    await until(states_are(runtime, ["Running"]))
    assert os.getpgid(replica) == replica
    assert os.getsid(replica) == os.getsid(0)
    autogroup = Path(f"/proc/{replica}/autogroup")
    if autogroup.exists():  # CONFIG_SCHED_AUTOGROUP
        assert autogroup.read_text() == Path("/proc/self/autogroup").read_text()


async def test_a_killed_replica_restarts_with_backoff(runtime: LocalRuntime) -> None:
    await runtime.apply(want())  # base_backoff=0.2: restarts wait 0.2 s, then 0.4 s
    ready = states_are(runtime, ["Running"])
    await until(ready)
    gaps = []
    for restarts in (1, 2):
        (old,) = pids(runtime)
        os.kill(old, signal.SIGKILL)
        killed = time.monotonic()

        async def restarted(old: int = old) -> bool:
            return pids(runtime) not in ([], [old])

        await until(restarted)
        gaps.append(time.monotonic() - killed)
        await until(ready)
        (replica,) = (await runtime.observe("svc")).replicas
        assert replica.restarts == restarts and replica.state == "Running"
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, gaps


async def test_permanent_exit_is_failed_and_not_restarted(runtime: LocalRuntime) -> None:
    await runtime.apply(want(behaviour="exit:3"))

    await until(states_are(runtime, ["Failed"]))
    (replica,) = (await runtime.observe("svc")).replicas
    assert replica.permanent and replica.reason == "ModelPullFailed"
    assert "oss://b/models is empty" in replica.message
    await asyncio.sleep(0.5)
    assert (await runtime.observe("svc")).replicas[0].restarts == 0


async def test_transient_exit_is_a_crash_loop(runtime: LocalRuntime) -> None:
    await runtime.apply(want(behaviour="exit:1"))

    async def looping() -> bool:
        r = (await runtime.observe("svc")).replicas
        return bool(r) and r[0].state == "CrashLoopBackOff" and r[0].restarts >= 2

    await until(looping)
    assert "exited with code 1" in (await runtime.observe("svc")).replicas[0].message


async def test_scale_up_and_down(runtime: LocalRuntime) -> None:
    await runtime.apply(want(replicas=3))

    await until(states_are(runtime, ["Running"] * 3))
    await runtime.apply(want(replicas=1))
    await until(states_are(runtime, ["Running"]))


async def test_rolling_update_keeps_a_ready_replica(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    await runtime.apply(want())
    await until(states_are(runtime, ["Running"]))

    async def ready_count() -> int:
        return sum(r.state == "Running" for r in (await runtime.observe("svc")).replicas)

    monkeypatch.setenv("FAKE_READY_AFTER", "1.0")  # the new replica takes a while
    new = want(template="t2")
    ready: list[int] = []  # ready replicas, sampled through the rollout
    sizes: list[int] = []  # replicas (old and new) at the same instants

    async def rolled_out() -> bool:
        await runtime.apply(new)
        ready.append(await ready_count())
        replicas = (await runtime.observe("svc")).replicas
        sizes.append(len(replicas))
        return [(r.template_hash, r.state) for r in replicas] == [("t2", "Running")]

    await until(rolled_out, timeout=30)
    # The new replica took ~1 s to become ready, sampled every 0.05 s: many samples, and the
    # old one served meanwhile (surge of one), never zero ready.
    assert len(ready) >= 5 and max(sizes) == 2, (ready, sizes)
    assert min(ready) == 1, ready


async def test_a_replica_ignoring_sigterm_is_killed_with_its_group_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM goes to the processor alone; whatever still runs after the grace period is
    SIGKILLed as a whole process group (here a replica and its child both ignore SIGTERM)."""
    grace = 0.5
    monkeypatch.setattr(local_module, "STOP_GRACE", grace)
    rt = LocalRuntime(tmp_path, lambda _: None, probe_interval=0.05, drain_seconds=0.0)
    await rt.apply(want(behaviour="stubborn"))
    (replica,) = await wait_until_async(lambda: pids(rt))
    try:
        await until(states_are(rt, ["Running"]))
        log = await wait_until_async(lambda: stub_announced(tmp_path))
        stub = int(log.split("stub pid ")[1].split()[0])
        stopping = time.monotonic()
        assert not await rt.delete("svc")
        await until(lambda: rt.delete("svc"), timeout=grace + 3)
        took = time.monotonic() - stopping
        assert not is_alive(replica) and not is_alive(stub)
        assert took >= grace, took  # not before the grace period
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(replica, signal.SIGKILL)  # so that close() returns whatever happened
        await rt.close()


def stub_announced(data_dir: Path) -> str | None:
    """The replica's log once its stub has written its pid there."""
    text = replica_log(data_dir)
    return text if "stub pid" in text else None


def replica_log(data_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in data_dir.rglob("*.log"))


async def test_delete_and_close_leave_no_process(runtime: LocalRuntime) -> None:
    await runtime.apply(want(replicas=2))

    await until(states_are(runtime, ["Running", "Running"]))
    started = pids(runtime)
    assert not await runtime.delete("svc")  # replicas stopping

    async def gone() -> bool:
        return await runtime.delete("svc")

    await until(gone)
    assert await runtime.services() == set()
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    await runtime.apply(replace(want(), service="svc"))
    await until(states_are(runtime, ["Running"]))
    last = pids(runtime)
    await runtime.close()
    with pytest.raises(ProcessLookupError):
        os.kill(last[0], 0)


async def test_pull_progress_is_published_until_the_replica_is_ready(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    notified: list[str] = []
    runtime.notify = notified.append
    ready = tmp_path / "ready"
    await runtime.apply(want(behaviour=f"until:{ready}"))

    async def started() -> bool:
        return bool(pids(runtime))

    await until(started)
    # What `openeas processor run` writes while it pulls, at the path the runtime gave it.
    report = tmp_path / "logs" / "svc" / "0.progress"
    pulling = Progress("pulling", 1, 3, 400, 1000, rate=200.0, eta_s=3.0)
    progress.write_file(report, pulling)

    async def shows(phase: str) -> bool:
        (replica,) = (await runtime.observe("svc")).replicas
        return replica.progress is not None and replica.progress.phase == phase

    notified.clear()
    await until(lambda: shows("pulling"))
    assert (await runtime.observe("svc")).replicas[0].progress == pulling
    assert (await runtime.observe("svc")).replicas[0].as_dict(current=True)["progress"] == {
        "phase": "pulling", "files_done": 1, "files_total": 3, "bytes_done": 400,
        "bytes_total": 1000, "rate": 200.0, "eta_s": 3.0, "requests_done": 0,
        "requests_total": 0, "started_at": None, "warm_up_seconds": None,
    }  # fmt: skip
    assert notified == ["svc"]  # the reconciler writes it (once: the file did not change)

    progress.write_file(report, Progress("pulled", 3, 3, 1000, 1000, 200.0, 0.0))
    await until(lambda: shows("loading"))  # pulled but not ready: the models are loading

    ready.touch()
    await until(states_are(runtime, ["Running"]))
    assert (await runtime.observe("svc")).replicas[0].progress is None


async def test_a_replica_with_warm_up_is_ready_only_once_it_says_it_is_warmed_up(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    await runtime.apply(replace(want(behaviour=f"warm-when:{go}"), warm_up="/warm"))

    async def triton_ready() -> bool:
        replicas = runtime._replicas.get("svc") or []
        if not replicas or replicas[0].base_url is None:
            return False
        url = replicas[0].base_url + "/v2/health/ready"
        return await asyncio.to_thread(_status, url) == 200

    await until(triton_ready)
    # The server answers ready, but the replica has not replayed its warm-up: no endpoint.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert await states(runtime) == ["Pending"]
        await asyncio.sleep(0.05)
    go.touch()
    await until(states_are(runtime, ["Running"]))
    (replica,) = (await runtime.observe("svc")).replicas
    assert replica.endpoint is not None
    # It keeps its warm-up's result: the cold-start breakdown reads the duration there.
    assert replica.progress is not None and replica.progress.phase == "warmed up"
    assert replica.progress.warm_up_seconds == 0.5


def _status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except (urllib.error.URLError, OSError):
        return 0


async def test_what_a_crashed_replica_leaves_in_its_group_goes_with_it(tmp_path: Path) -> None:
    rt = LocalRuntime(tmp_path, lambda _: None, probe_interval=0.05, drain_seconds=0.0)
    await rt.apply(want(behaviour="crash-leaving-stub"))
    try:
        log = await wait_until_async(lambda: stub_announced(tmp_path))
        stub = int(log.split("stub pid ")[1].split()[0])
        await wait_until_async(lambda: not is_alive(stub), timeout=10)
    finally:
        await rt.close()


async def test_ready_replicas_publish_metrics_and_cpu(runtime: LocalRuntime) -> None:
    await runtime.apply(want())
    await until(states_are(runtime, ["Running"]))
    (replica,) = (await runtime.observe("svc")).replicas
    assert replica.metrics is not None and replica.metrics.startswith("http://127.0.0.1:")
    assert await runtime.cpu_cores("svc") == []  # a rate needs two readings

    async def measured() -> bool:
        cores = await runtime.cpu_cores("svc")
        return len(cores) == 1 and 0.0 <= cores[0] < 2.0

    await until(measured)


@pytest.mark.parametrize(
    ("state", "ready", "misses", "after"),
    [
        ("Pending", True, 0, "Running"),
        ("Pending", False, 1, "Pending"),
        ("Running", True, 0, "Running"),
        ("Running", False, 1, "Running"),  # one late answer from a busy replica
        ("Running", False, 2, "Running"),
        ("Running", False, 3, "Pending"),  # READY_PROBE_FAILURES in a row
        ("Running", False, 9, "Pending"),
    ],
)
def test_a_ready_replica_turns_pending_only_after_probes_fail_in_a_row(
    state: ReplicaState, ready: bool, misses: int, after: ReplicaState
) -> None:
    assert probed_state(state, ready, misses) == after


async def test_a_ready_replica_missing_a_probe_or_two_keeps_its_endpoint(
    tmp_path: Path,
) -> None:
    """Under load a replica may answer a probe late; its endpoint (and so every request
    routed to it) stays until probes fail READY_PROBE_FAILURES times in a row."""
    rt = LocalRuntime(tmp_path, lambda _: None, probe_interval=0.05, ready_probe_interval=0.3)
    flag = tmp_path / "ready"
    flag.touch()
    try:
        await rt.apply(want(behaviour=f"until:{flag}"))
        await until(states_are(rt, ["Running"]))
        flag.unlink()  # not ready for 0.35 s: at most two probes of 0.3 s fall in it
        deadline = time.monotonic() + 0.35
        while time.monotonic() < deadline:
            assert await states(rt) == ["Running"]
            await asyncio.sleep(0.02)
        flag.touch()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert await states(rt) == ["Running"]
            await asyncio.sleep(0.05)
        flag.unlink()  # gone for good: Pending after three probes
        started = time.monotonic()
        await until(states_are(rt, ["Pending"]))
        assert time.monotonic() - started > 0.5
    finally:
        await rt.close()


async def test_a_replica_that_rings_is_running_when_it_says_so_not_at_a_probe_period(
    tmp_path: Path,
) -> None:
    """A replica that rings its doorbell (the triton processor) is ProcessStarting until its
    server starts, Starting while it loads, and Running as soon as it rings ready, though
    the probe period besides is far longer; one that never rings waits for that period."""
    rt = LocalRuntime(tmp_path, lambda _: None, probe_interval=0.05, rung_probe_interval=30.0)
    flag = tmp_path / "ready"
    try:
        await rt.apply(want(behaviour=f"ring-until:{flag}"))
        await until(reasons_are(rt, ["Starting"]))  # its server started: it said so
        await asyncio.sleep(0.3)
        assert await states(rt) == ["Pending"]
        flag.touch()
        started = time.monotonic()
        await until(states_are(rt, ["Running"]))
        assert time.monotonic() - started < 5.0  # the ring, not the 30 s probe period
    finally:
        await rt.close()
    muted = LocalRuntime(tmp_path, lambda _: None, probe_interval=0.05, rung_probe_interval=30.0)
    try:
        await muted.apply(want(behaviour=f"mute-until:{flag}"))  # ready at once, never rings
        await asyncio.sleep(1.5)
        assert await states(muted) == ["Pending"]
        assert await reasons_are(muted, ["ProcessStarting"])()
    finally:
        await muted.close()


def reasons_are(rt: LocalRuntime, expected: list[str]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return [r.reason for r in (await rt.observe("svc")).replicas] == expected

    return check
