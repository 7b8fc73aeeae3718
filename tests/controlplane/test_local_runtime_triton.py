"""The local runtime with real Triton replicas pulling from the OSS stand-in: a replica with
``warm_up_data_path`` is reported ready only after its warm-up requests ran (Triton's own
statistics count them before anyone else called), and a scale-up's second replica reuses
the data dir's model cache (not one byte more from OSS, counted at the stand-in)."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from controlplane.runtime.base import DesiredReplicaSet, ReplicaStatus, Resources
from controlplane.runtime.local import LocalRuntime
from testing.oss_server import OssServer
from testing.waiting import wait_until_async
from tests.fixtures_triton import EXAMPLE_MODELS

pytestmark = pytest.mark.slow
WARM_UP = EXAMPLE_MODELS.parent / "warm-up"


def successes(replica: ReplicaStatus) -> int:
    url = f"{replica.endpoint}/v2/models/add_sub/stats"
    with urllib.request.urlopen(url, timeout=5) as response:
        stats = json.loads(response.read())
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


async def test_warm_up_before_ready_and_a_scale_up_pulls_nothing(
    tmp_path: Path, oss_server: OssServer, oss_model_repo: str, oss_env: dict[str, str]
) -> None:
    want = DesiredReplicaSet(
        service="svc",
        object_name="svc",
        uid="u",
        generation=1,
        replicas=1,
        processor="triton",
        params=(f"--model-repository={oss_model_repo}",),
        oss_endpoint=None,
        resources=Resources(cpu=1, gpu=0, memory_mb=2000),
        template_hash="t1",
        warm_up=str(WARM_UP),
    )
    runtime = LocalRuntime(tmp_path, lambda _: None, probe_interval=0.1)
    seen: list[ReplicaStatus] = []

    async def running(count: int) -> bool:
        seen[:] = (await runtime.observe("svc")).replicas
        return [r.state for r in seen] == ["Running"] * count

    try:
        await runtime.apply(want)
        await wait_until_async(lambda: running(1), 120, interval=0.1)
        pulled = oss_server.bytes_served()
        assert pulled > 0
        (first,) = seen
        # Reported ready with the warm-up's two requests already counted by Triton.
        assert successes(first) == 2
        assert first.progress is not None and first.progress.phase == "warmed up"
        assert first.progress.warm_up_seconds is not None

        await runtime.apply(replace(want, replicas=2))
        await wait_until_async(lambda: running(2), 120, interval=0.1)
        assert oss_server.bytes_served() == pulled  # the second replica downloaded nothing
        assert [successes(r) for r in seen] == [2, 2]
        log = (tmp_path / "logs" / "svc" / "1.log").read_text(errors="replace")
        assert "openeas: warmed up: 2 requests replayed in" in log
    finally:
        await runtime.close()
