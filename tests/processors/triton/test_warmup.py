"""Warm-up (``warm_up_data_path``): both request file formats parsed (table), bad files
refused with the file named, and, with real Triton, the requests replayed before the replica
says it is ready (Triton's own statistics count them) or the replica failing when Triton
refuses one."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from contract.progress import WARMED_UP, describe
from processors import exits, progress
from processors.base import READY_FILE_ENV, Ports
from processors.triton import plan
from processors.triton.warmup_files import WarmUpFileError, WarmUpRequest, load, parse
from testing.oss_server import OssServer
from testing.waiting import wait_until
from tests.fixtures_triton import EXAMPLE_MODELS, free_port

WARM_UP = EXAMPLE_MODELS.parent / "warm-up"
JSON_BODY = b'{"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}]}'


def binary_body(sizes: list[int], payload: bytes) -> tuple[bytes, int]:
    inputs = [
        {"name": f"IN{i}", "shape": [n // 4], "datatype": "FP32",
         "parameters": {"binary_data_size": n}}
        for i, n in enumerate(sizes)
    ]  # fmt: skip
    header = json.dumps({"inputs": inputs}).encode()
    return header + payload, len(header)


BIN_BODY, BIN_HEADER = binary_body([8, 4], struct.pack("<3f", 1, 2, 3))


@pytest.mark.parametrize(
    ("source", "data", "expected"),
    [
        ("add_sub/1.json", JSON_BODY, WarmUpRequest("add_sub/1.json", "add_sub", JSON_BODY, None)),
        ("add_sub.json", JSON_BODY, WarmUpRequest("add_sub.json", "add_sub", JSON_BODY, None)),
        ("add_sub.7.json", JSON_BODY, WarmUpRequest("add_sub.7.json", "add_sub", JSON_BODY, None)),
        ("m/a/b.bin", BIN_BODY, WarmUpRequest("m/a/b.bin", "m", BIN_BODY, BIN_HEADER)),
        ("m.bin", BIN_BODY, WarmUpRequest("m.bin", "m", BIN_BODY, BIN_HEADER)),
        # A .bin of JSON inputs only: the whole file is the header.
        ("m/0.bin", JSON_BODY, WarmUpRequest("m/0.bin", "m", JSON_BODY, len(JSON_BODY))),
    ],
)
def test_request_files_name_their_model_and_body(
    source: str, data: bytes, expected: WarmUpRequest
) -> None:
    assert parse(source, data) == expected


def test_a_binary_header_with_non_ascii_text_is_measured_in_bytes() -> None:
    header = json.dumps({"id": "é", "inputs": []}, ensure_ascii=False).encode()
    assert parse("m/1.bin", header).header_length == len(header)


@pytest.mark.parametrize(
    ("source", "data", "says"),
    [
        ("m/1.txt", JSON_BODY, "name it <model>/<n>.json"),
        ("m/1.json", b"\x00\x01", "is not JSON"),
        ("m/1.json", b"[1, 2]", 'an object with "inputs"'),
        ("m/1.json", b'{"input": []}', 'an object with "inputs"'),
        ("m/1.bin", b"\x00garbage", "does not start with a JSON infer header"),
        ("m/1.bin", BIN_BODY[:-1], "11 bytes follow the JSON header but"),
        ("m/1.bin", BIN_BODY + b"x", "13 bytes follow"),
        (".x.json", JSON_BODY, "no model name"),
    ],
)
def test_bad_request_files_are_refused_with_the_file_and_the_fix(
    source: str, data: bytes, says: str
) -> None:
    with pytest.raises(WarmUpFileError, match=source.replace(".", r"\.")) as caught:
        parse(source, data)
    assert says in str(caught.value)


def test_load_reads_a_folder_in_path_order_skipping_dot_files(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "1.json").write_bytes(JSON_BODY)
    (tmp_path / "a.json").write_bytes(JSON_BODY)
    (tmp_path / ".openeas-manifest.json").write_text("{}")  # the pull's own
    assert [(r.source, r.model) for r in load(tmp_path)] == [("a.json", "a"), ("b/1.json", "b")]
    assert [r.source for r in load(tmp_path / "a.json")] == ["a.json"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(WarmUpFileError, match="holds no request files"):
        load(tmp_path / "empty")
    with pytest.raises(WarmUpFileError, match="does not exist"):
        load(tmp_path / "missing")


def test_the_example_warm_up_folder_parses() -> None:
    requests = load(WARM_UP)
    assert [(r.source, r.model, r.header_length is not None) for r in requests] == [
        ("add_sub/1.json", "add_sub", False),
        ("add_sub/2.bin", "add_sub", True),
    ]


def test_describe_says_how_far_the_warm_up_is() -> None:
    from contract.progress import Progress

    assert (
        describe(Progress("warming up", 0, 0, 0, 0, requests_done=1, requests_total=4))
        == "warming up: 1/4 requests replayed"
    )
    done = Progress(WARMED_UP, 0, 0, 0, 0, requests_done=4, requests_total=4, warm_up_seconds=2.4)
    assert describe(done.as_dict()) == "warmed up: 4 requests replayed in 2s"


def _inferences(http_port: int, model: str) -> Any:
    url = f"http://127.0.0.1:{http_port}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=5) as response:
        stats = json.loads(response.read())
    return stats["model_stats"][0]["inference_stats"]["success"]["count"]


def _start(
    warm_up: str, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], Ports, Path, Path, Path]:
    ports = Ports(http=free_port(), grpc=free_port(), metrics=free_port())
    replica = plan.plan([f"--model-repository={EXAMPLE_MODELS}"], ports, None, None,
                        warm_up=warm_up)  # fmt: skip
    assert replica.warms_up
    ready, report, log = tmp_path / "ready", tmp_path / "progress", tmp_path / "replica.log"
    environ = {
        **os.environ,
        **(env or {}),
        READY_FILE_ENV: str(ready),
        progress.ENV_FILE: str(report),
        "OPENEAS_MODEL_CACHE": str(tmp_path / "cache"),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(replica.command, env=environ, stdout=out, stderr=out)
    return process, ports, ready, report, log


@pytest.mark.slow
@pytest.mark.parametrize("source", ["local", "oss"])
def test_warm_up_requests_are_replayed_before_the_replica_is_ready(
    source: str,
    tmp_path: Path,
    oss_server: OssServer,
    oss_env: dict[str, str],
) -> None:
    warm_up, env = str(WARM_UP), None
    if source == "oss":
        for path in sorted(p for p in WARM_UP.rglob("*") if p.is_file()):
            oss_server.put("triton-model-repo", f"warm-up/{path.relative_to(WARM_UP)}",
                           path.read_bytes())  # fmt: skip
        warm_up, env = "oss://triton-model-repo/warm-up", {"OSS_ENDPOINT": oss_server.endpoint}
    process, ports, ready, report, log = _start(warm_up, tmp_path, env)
    try:
        wait_until(lambda: ready.exists() or process.poll() is not None, 90, what="warmed up")
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        # No user request was made: Triton counted the warm-up's two before "ready".
        assert _inferences(ports.http, "add_sub") == 2
        said = progress.read_file(report)
        assert said is not None and said.phase == WARMED_UP
        assert said.requests_total == 2 and said.warm_up_seconds is not None
        assert said.started_at is not None
        assert "openeas: warmed up: 2 requests replayed in" in log.read_text(errors="replace")
    finally:
        process.terminate()
        process.wait(timeout=60)


@pytest.mark.slow
def test_a_refused_warm_up_request_fails_the_replica_naming_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "warm"
    (folder / "no_such_model").mkdir(parents=True)
    (folder / "no_such_model" / "1.json").write_bytes(JSON_BODY)
    process, _, ready, _, log = _start(str(folder), tmp_path)
    try:
        assert process.wait(timeout=90) == exits.WARM_UP_FAILED
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text(errors="replace")
    assert "openeas: warm-up request no_such_model/1.json to model 'no_such_model' failed: " \
        "Triton answered 404" in output  # fmt: skip
    assert not ready.exists()
    assert exits.PERMANENT[exits.WARM_UP_FAILED] == "WarmUpFailed"


def test_a_malformed_warm_up_file_fails_before_triton_starts(tmp_path: Path) -> None:
    from processors.triton import run

    folder = tmp_path / "warm"
    (folder / "m").mkdir(parents=True)
    (folder / "m" / "1.json").write_text("{not json")
    ports = Ports(http=free_port(), grpc=free_port(), metrics=free_port())
    code = run.run([f"--model-repository={EXAMPLE_MODELS}"], ports, tmp_path, str(folder))
    assert code == exits.WARM_UP_FAILED
