"""An async service in front of real Triton replicas, driven by EAS's ``QueueClient``
unchanged: 100 ``add_sub`` requests put through the input queue with Triton's path as the
put's suffix, one replica SIGKILLed mid-way holding its window (still listed in the route
table, as before the platform notices), and every answer in the sink exactly once, each one
right."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

import pytest

from tests.fixtures_triton import TritonServer
from tests.gateway.conftest import GatewayFactory
from tests.gateway.test_queue import REDIS_URL, client, table, tags_of
from tests.gateway.test_queue import prefix as prefix  # the fixture: a Redis key prefix per test

pytestmark = pytest.mark.slow

N = 100


def request(i: int) -> bytes:
    a = [float(i), 1.0, 2.0, 3.0]
    b = [1.0, float(i), 0.5, -1.0]
    inputs = [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": a},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": b},
    ]
    return json.dumps({"id": str(i), "inputs": inputs}).encode()


def test_a_hundred_puts_a_replica_killed_every_answer_once(
    make_gateway: GatewayFactory,
    triton_server: TritonServer,
    second_triton: tuple[str, subprocess.Popen[bytes]],
    prefix: str,
) -> None:
    second_url, second = second_triton
    routes = table([triton_server.base_url, second_url], window=2)
    gw = make_gateway(routes, redis_url=REDIS_URL, queue_prefix=prefix, queue_claim_idle_s=30)
    infer = client(gw.hostport, "asy")
    infer.path_suffix = "v2/models/add_sub/infer"
    sink = client(gw.hostport, "asy/sink")
    # Frozen first, so that it surely holds its window when it dies: the platform sends it
    # two messages that it never answers.
    os.killpg(second.pid, signal.SIGSTOP)
    puts = {infer.put(request(i))[1]: i for i in range(N)}
    assert len(puts) == N
    answers: list[Any] = []

    def held_by_second() -> int:
        consumers = json.loads(infer.attributes()["consumers.list"])
        return sum(c["pending"] for c in consumers if c["name"] == second_url)

    while len(answers) < N // 4 or held_by_second() < 2:
        answers += sink.get(length=5, timeout="2s")
    os.killpg(second.pid, signal.SIGKILL)  # mid-way, holding 2; the route still lists it
    second.wait()
    killed_with = len(answers)
    deadline = time.monotonic() + 60
    while len(answers) < N and time.monotonic() < deadline:
        answers += sink.get(length=N, timeout="2s")
    assert killed_with < N, "every answer came before the kill: nothing was tested"
    rids = [tags_of(a)["requestId"] for a in answers]
    assert sorted(rids) == sorted(puts)  # every one, once
    for a in answers:
        i = puts[tags_of(a)["requestId"]]
        assert tags_of(a)["status"] == "200", a.data
        outputs = {o["name"]: o["data"] for o in json.loads(a.data)["outputs"]}
        assert outputs["OUTPUT0"] == [i + 1.0, 1.0 + i, 2.5, 2.0]
        assert outputs["OUTPUT1"] == [i - 1.0, 1.0 - i, 1.5, 4.0]
    redelivered = dict(gw.runner.gateway.metrics.queue_redelivered.items())
    print(f"answers before the kill: {killed_with}; redelivered: {redelivered}")
    assert redelivered[("asy",)] >= 2  # what the killed replica held
    time.sleep(1.0)
    assert sink.attributes()["stream.length"] == "0"  # no second answer came later
    assert infer.attributes()["stream.length"] == "0"
