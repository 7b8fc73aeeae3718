"""The local runtime and EAS's rollout, shutdown and container fields, with real processes:
``rolling_strategy`` bounds a rollout's surge, ``termination_grace_period`` and
``enable_sigterm`` set how a replica is stopped, and a container that is not Triton runs
its command here with a folder per replica standing in for its mount path, an OSS mount
pulled into it."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from controlplane.runtime.base import DesiredReplicaSet, Image, Mount
from controlplane.runtime.local import LocalRuntime, rollout, standing_in, stop_grace
from testing.waiting import wait_until_async
from tests.controlplane.test_local_runtime import (
    fake_processor,
    runtime,
    states_are,
    until,
    want,
)
from tests.fixtures_triton import free_port

__all__ = ["fake_processor", "runtime"]


@pytest.mark.parametrize(
    ("rolling", "replicas", "expected"),
    [
        (None, 4, (4, 0)),  # no strategy: every new replica at once, none lost
        ((1, 0), 4, (1, 0)),
        (("50%", "25%"), 4, (2, 1)),
        (("0%", "10%"), 1, (0, 1)),  # rounded to nothing: still rolls, one at a time
    ],
)
def test_rollout_counts(
    rolling: tuple[int | str, int | str] | None, replicas: int, expected: tuple[int, int]
) -> None:
    assert rollout(replace(want(replicas), rolling=rolling)) == expected


def test_stop_grace_is_the_spec_s_termination_grace_period() -> None:
    assert stop_grace(want()) == 15.0
    assert stop_grace(replace(want(), termination_grace_seconds=3)) == 3.0


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("/models", "/tmp/r/0"),
        ("--model-repository=/models", "--model-repository=/tmp/r/0"),
        ("/models/triton", "/tmp/r/0/triton"),
        ("/modelsx", "/modelsx"),
        ("/data/models", "/data/models"),
    ],
)
def test_mount_paths_are_replaced_where_they_are_named(word: str, expected: str) -> None:
    assert standing_in(word, {"/models": Path("/tmp/r/0")}) == expected


async def test_a_rollout_keeps_within_max_surge(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    await runtime.apply(want(3))
    await until(states_are(runtime, ["Running"] * 3))
    monkeypatch.setenv("FAKE_READY_AFTER", "0.5")
    new = replace(want(3, template="t2"), rolling=(1, 0))
    sizes: list[int] = []
    ready: list[int] = []

    async def rolled_out() -> bool:
        await runtime.apply(new)
        replicas = [r for r in (await runtime.observe("svc")).replicas if r.state != "Terminating"]
        sizes.append(len(replicas))
        ready.append(sum(r.state == "Running" for r in replicas))
        return [(r.template_hash, r.state) for r in replicas] == [("t2", "Running")] * 3

    await until(rolled_out, timeout=60)
    assert max(sizes) == 4, sizes  # one above the count at most (without it: 6)
    assert min(ready) >= 3, ready  # max_unavailable 0: never below the count


async def test_a_container_runs_its_command_with_its_oss_mount(
    tmp_path: Path, oss_model_repo: str, oss_env: dict[str, str]
) -> None:
    port = free_port()
    image = Image(
        image="python:3.11",
        argv=(sys.executable, "-m", "http.server", str(port), "--directory", "/srv/models"),
        port=port,
        env=(("GREETING", "hello"),),
    )
    desired: DesiredReplicaSet = replace(
        want(),
        processor="container",
        params=(),
        image=image,
        mounts=(Mount("/srv/models", "oss", oss_model_repo + "/"),),
    )
    rt = LocalRuntime(tmp_path, lambda _: None, probe_interval=0.05, drain_seconds=0.0)
    try:
        await rt.apply(desired)
        started = time.monotonic()
        (replica,) = await wait_until_async(
            lambda: [r for r in rt._replicas["svc"] if r.state == "Running"], 60
        )
        assert replica.base_url == f"http://127.0.0.1:{port}"
        got = httpx.get(f"{replica.base_url}/add_sub/config.pbtxt")
        assert got.status_code == 200 and b"add_sub" in got.content, time.monotonic() - started
        folder = tmp_path / "mounts" / "svc" / str(replica.number) / "0"
        assert (folder / "add_sub" / "config.pbtxt").is_file()
    finally:
        await rt.close()
