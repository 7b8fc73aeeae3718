"""``openeas processor run triton`` for real: a replica's command (from the plan) brings up
tritonserver on a local or an OSS repository (the stand-in), serves correct inferences to the
official client, and stops cleanly on SIGTERM with no orphans; storage failures exit with
their distinct codes. Also the shared ``triton_server`` fixture, and the command line."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from openeas import cli as openeas_cli
from processors import exits, repository
from processors.base import Ports, ReplicaPlan
from processors.storage.retry import Backoff
from processors.triton import binary, fences, flags, plan, run
from testing.oss_server import OssServer
from testing.waiting import wait_until
from tests.fixtures_triton import (
    EXAMPLE_MODELS,
    TritonServer,
    check_example_models,
    descendants,
    free_port,
    is_alive,
    wait_ready,
)


def test_tritonserver_argv_puts_the_platforms_flags_after_the_users() -> None:
    server = binary.Tritonserver(
        Path("/opt/tritonserver/bin/tritonserver"), "PATH", args=["--backend-directory=/b"]
    )
    checked = flags.parse(["--model-repository=oss://bucket/m", "--log-verbose=1"])
    ports = Ports(1, 2, 3, "0.0.0.0")
    argv = run.tritonserver_argv(server, checked, Path("/cache/m"), ports, "k3y", "openeas_ab_")
    fence = "model-repository,shared-memory,trace,logging:openeas-admin-key=k3y"
    assert argv == [
        "/opt/tritonserver/bin/tritonserver",
        "--model-repository=/cache/m",
        "--log-verbose=1",
        "--http-port=1",
        "--grpc-port=2",
        "--metrics-port=3",
        "--http-address=0.0.0.0",
        "--grpc-address=0.0.0.0",
        "--metrics-address=0.0.0.0",
        f"--http-restricted-api={fence}",
        f"--grpc-restricted-protocol={fence}",
        "--backend-config=python,shm-region-prefix-name=openeas_ab_",
        "--backend-directory=/b",
    ]


def test_each_start_names_its_shared_memory_apart() -> None:
    prefixes = {run.shm_prefix() for _ in range(100)}
    assert len(prefixes) == 100
    # The tenant's own --backend-config can neither pass it nor collide with it.
    assert all(p.startswith("openeas_") and p.endswith("_") for p in prefixes)


@pytest.mark.slow
def test_shared_triton_server_serves_the_example_models(triton_server: TritonServer) -> None:
    assert triton_server.base_url == f"http://{triton_server.http_url}"
    check_example_models(triton_server.http_url)


def _replica(model_repository: str) -> ReplicaPlan:
    ports = Ports(http=free_port(), grpc=free_port(), metrics=free_port())
    return plan.plan([f"--model-repository={model_repository}"], ports, None, None)


@contextlib.contextmanager
def running_replica(
    replica: ReplicaPlan, tmp_path: Path, env: Mapping[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], list[int], Path]]:
    """The replica started as a runtime would and ready: (its process, the processes
    below it once ready — tritonserver and its python backend stubs —, its log)."""
    log = tmp_path / "replica.log"
    environ = {**os.environ, **(env or {}), **replica.env}
    environ.setdefault("OPENEAS_MODEL_CACHE", str(tmp_path / "model-cache"))
    with log.open("wb") as out:
        process = subprocess.Popen(replica.command, env=environ, stdout=out, stderr=out)
    try:
        base_url = f"http://127.0.0.1:{replica.http_port}"
        wait_ready(base_url, process, log, path=replica.readiness_path)
        family = descendants(process.pid)
        assert family, "tritonserver should run as the processor's child"
        yield process, family, log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def survivors(family: list[int]) -> list[str]:
    """Processes of ``family`` still alive, by command line (a check that they all end)."""
    alive = []
    for pid in family:
        if is_alive(pid):
            with contextlib.suppress(OSError):
                alive.append(
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
    return alive


def serve_check_and_stop(
    replica: ReplicaPlan, tmp_path: Path, env: Mapping[str, str] | None = None
) -> str:
    """Run the replica as a runtime would, check inference, SIGTERM it; its log."""
    with running_replica(replica, tmp_path, env) as (process, family, log):
        base_url = f"http://127.0.0.1:{replica.http_port}"
        with urllib.request.urlopen(base_url + replica.liveness_path, timeout=5) as live:
            assert live.status == 200
        check_example_models(f"127.0.0.1:{replica.http_port}")

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text(errors="replace")[-3000:]
        wait_until(lambda: not survivors(family), 30, what="no orphans left behind")
    return log.read_text(errors="replace")


def shm_regions(family: list[int]) -> set[str]:
    """The /dev/shm files the processes of ``family`` have mapped."""
    found = set()
    for pid in family:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                if "/dev/shm/" in line:
                    found.add(line.split("/dev/shm/", 1)[1].removesuffix(" (deleted)"))
    return found


@pytest.mark.slow
def test_two_replicas_on_one_host_keep_their_python_backends_shared_memory_apart(
    tmp_path: Path,
) -> None:
    """Both serve the python-backend add_sub, each from shared memory regions named from
    its own prefix (python backends before the bundled one number them alike on every
    tritonserver: two replicas on one host would open each other's)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, two = _replica(str(EXAMPLE_MODELS)), _replica(str(EXAMPLE_MODELS))
    with (
        running_replica(one, tmp_path / "a") as (_, first, _),
        running_replica(two, tmp_path / "b") as (_, second, _),
    ):
        for replica in (one, two):  # both serve, add_sub's stub included
            check_example_models(f"127.0.0.1:{replica.http_port}")
        a, b = shm_regions(first), shm_regions(second)
        assert a and b, (a, b)
        assert not a & b, a & b
        assert all(name.startswith("openeas_") for name in a | b), a | b


@pytest.mark.slow
def test_a_sigkilled_replica_leaves_no_process_behind(tmp_path: Path) -> None:
    """SIGKILL reaches the processor alone (no chance to forward anything): the kernel sends
    tritonserver SIGTERM (PR_SET_PDEATHSIG), which stops its python backend stubs."""
    with running_replica(_replica(str(EXAMPLE_MODELS)), tmp_path) as (process, family, _):
        assert len(family) >= 2, survivors(family)  # tritonserver and at least one stub
        process.kill()
        process.wait()
        try:
            wait_until(lambda: not survivors(family), 60, what="tritonserver and stubs end")
        finally:
            for pid in family:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_run_serves_a_local_repository_and_stops_on_sigterm(tmp_path: Path) -> None:
    output = serve_check_and_stop(_replica(str(EXAMPLE_MODELS)), tmp_path)
    assert f"openeas: serving {EXAMPLE_MODELS} from {EXAMPLE_MODELS}" in output


@pytest.mark.slow
def test_run_pulls_from_oss_then_serves(
    oss_server: OssServer, oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    ports = Ports(http=free_port(), grpc=free_port(), metrics=free_port())
    # The spec's oss_endpoint wins over the replica's OSS_ENDPOINT (a dead port here).
    replica = plan.plan([f"--model-repository={oss_model_repo}"], ports, oss_server.endpoint, None)
    cache = tmp_path / "model-cache"
    env = {"OSS_ENDPOINT": "http://127.0.0.1:9", "OPENEAS_MODEL_CACHE": str(cache)}

    output = serve_check_and_stop(replica, tmp_path, env)

    local = repository.slot(cache, oss_model_repo, oss_server.endpoint)
    assert f"openeas: serving {oss_model_repo} from {local}" in output
    assert (local / "add_sub" / "config.pbtxt").is_file()
    assert oss_env["OSS_ACCESS_KEY_SECRET"] not in output


def _post(url: str, headers: Mapping[str, str]) -> int:
    request = urllib.request.Request(url, data=b"{}", headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.slow
def test_a_replica_fences_triton_admin_apis_even_in_explicit_mode(tmp_path: Path) -> None:
    """The flags are in tritonserver's real argv; without the per-start key Triton refuses
    the repository API a tenant's explicit mode would expose, while readiness, inference,
    metadata and statistics stay open (the probe and the gateway's tenant paths)."""
    ports = Ports(http=free_port(), grpc=free_port(), metrics=free_port())
    params = [f"--model-repository={EXAMPLE_MODELS}", "--model-control-mode=explicit"]
    replica = plan.plan([*params, "--load-model=*"], ports, None, None)
    with running_replica(replica, tmp_path) as (_, family, log):
        argv = next(
            args
            for pid in family
            if (args := Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))[0].endswith(
                b"tritonserver"
            )
        )
        fenced = [a.decode() for a in argv if a.startswith(b"--http-restricted-api=")]
        assert len(fenced) == 1, argv
        apis, _, header = fenced[0].partition("=")[2].partition(":")
        assert apis == ",".join(fences.RESTRICTED_APIS)
        name, _, key = header.partition("=")
        assert name == fences.HEADER and len(key) >= 32
        assert f"--grpc-restricted-protocol={fenced[0].partition('=')[2]}".encode() in argv
        assert key not in log.read_text(errors="replace")

        base = f"http://127.0.0.1:{ports.http}/v2"
        for path in ("/repository/index", "/repository/models/add_sub/unload", "/logging"):
            assert _post(base + path, {}) == 403, path
        check_example_models(f"127.0.0.1:{ports.http}")
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{ports.http}")
        try:
            assert client.is_server_ready() and client.get_server_metadata()
            assert client.get_model_metadata("add_sub") and client.get_model_config("add_sub")
            assert client.get_inference_statistics("add_sub")
        finally:
            client.close()
        assert _post(base + "/repository/index", {fences.HEADER: key}) == 200


def _run_in_process(model_repository: str, cache: Path) -> int:
    argv = ["processor", "run", "triton", "--model-cache", str(cache), "--"]
    return openeas_cli.main([*argv, f"--model-repository={model_repository}"])


@pytest.mark.usefixtures("oss_env")
def test_missing_bucket_exits_with_the_permanent_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run_in_process("oss://no-such-bucket/models", tmp_path) == exits.PULL_PERMANENT
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("openeas: model pull failed: "), lines


@pytest.mark.usefixtures("oss_env")
def test_server_errors_exit_with_the_temporary_code(
    oss_server: OssServer,
    oss_model_repo: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The package re-exports pull(), hiding its module: fetch the module to shorten retries.
    pull_module = importlib.import_module("processors.storage.pull")
    monkeypatch.setattr(pull_module, "BACKOFF", Backoff(attempts=2, first_delay=0.01))
    oss_server.fail_next(n=100, status=503)
    assert _run_in_process(oss_model_repo, tmp_path) == exits.PULL_TEMPORARY
    assert capsys.readouterr().err.startswith("openeas: model pull failed: ")
