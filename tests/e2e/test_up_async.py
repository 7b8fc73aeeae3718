"""An async service on ``openeas up`` with nothing configured: the embedded Redis starts with
the platform, EAS's ``QueueClient`` puts through the gateway and a real Triton replica
answers into the sink; work put while the service is stopped is kept across a restart of
the whole platform (the queue lives in the data dir) and answered once it starts again."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from eas_prediction.queue_client import QueueClient

from testing.waiting import wait_until
from tests.e2e.test_up import Platform
from tests.e2e.test_up import platform as platform  # the fixture: `openeas up` running

pytestmark = pytest.mark.slow
NAME = "async_add"


def request(i: int) -> bytes:
    inputs = [
        {"name": n, "shape": [4], "datatype": "FP32", "data": [float(i), 1.0, 2.0, 3.0]}
        for n in ("INPUT0", "INPUT1")
    ]
    return json.dumps({"inputs": inputs}).encode()


def queue(platform: Platform, name: str, token: str) -> QueueClient:
    c = QueueClient(f"127.0.0.1:{platform.port}", name)
    c.set_token(token)
    c.init()
    return c


def answers(sink: QueueClient, n: int, timeout_s: float = 120) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += sink.get(length=n, timeout="2s")
    return got


def test_async_journey_on_openeas_up(platform: Platform, oss_model_repo: str) -> None:
    log = (platform.tmp / "up.log").read_text()
    assert "embedded Redis for async services on redis://127.0.0.1:" in log
    config = platform.tmp / "async.json"
    config.write_text(
        json.dumps(
            {
                "name": NAME,
                "processor": "triton",
                "processor_params": [f"--model-repository={oss_model_repo}"],
                "metadata": {"type": "Async", "instance": 1, "rpc": {"worker_threads": 2}},
                "queue": {"default_path": "/v2/models/add_sub/infer"},
            }
        )
    )
    out = platform.eascmd("create", str(config))
    token = out.splitlines()[4].split("|")[2].strip()
    inputs, sink = queue(platform, NAME, token), queue(platform, f"{NAME}/sink", token)
    rids = {inputs.put(request(i))[1]: i for i in range(10)}
    got = answers(sink, 10)
    assert sorted(a.index for a in got) == sorted({a.index for a in got})
    for a in got:
        tags = {e.key: e.value for e in a.tags}
        i = rids.pop(tags["requestId"])
        outputs = {o["name"]: o["data"] for o in json.loads(a.data)["outputs"]}
        assert outputs["OUTPUT0"] == [2.0 * i, 2.0, 4.0, 6.0]
    assert rids == {}
    assert "input 0 (0 held by replicas)" in platform.eascmd("desc", NAME)

    # Stopped: puts are still queued; they survive a restart of the whole platform.
    platform.eascmd("stop", NAME)
    wait_until(lambda: platform.describe(NAME)["Status"] == "Stopped", 60, what="stopped")
    kept = {inputs.put(request(i))[1] for i in range(100, 105)}
    assert "input 5 (0 held by replicas)" in platform.eascmd("desc", NAME)
    platform.stop()
    platform.start()
    platform.eascmd("start", NAME)
    inputs, sink = queue(platform, NAME, token), queue(platform, f"{NAME}/sink", token)
    got = answers(sink, 5)
    assert {next(e.value for e in a.tags if e.key == "requestId") for a in got} == kept
