"""``eascmd logs -f`` and ``--previous`` on the local runtime: the unmodified ``eascmd`` as a
process against the control plane served by uvicorn, reading the replica log files the
local runtime writes (each start of a replica's process opens with its marker line)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controlplane.runtime.local import START_MARKER, LocalLogs
from controlplane.settings import Settings
from testing.waiting import wait_until
from tests.controlplane.conftest import ADMIN, LiveServer, seed_spec

EASCMD = Path(sys.executable).parent / "eascmd"


@pytest.fixture
def service(live_api: LiveServer, settings: Settings) -> Iterator[Path]:
    """A service whose replica 0 has run twice (crashed once); its log file."""
    r = httpx.post(
        f"{live_api.url}/api/v2/services",
        json=seed_spec(),
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 200, r.text
    folder = settings.data_dir / "logs" / "triton_test"
    folder.mkdir(parents=True)
    log = folder / "0.log"
    log.write_text(
        f"{START_MARKER}0 on port 8000\nloading\nSegmentation fault\n"
        f"{START_MARKER}1 on port 8000\nloading\nready\n"
    )
    yield log


def eascmd(live_api: LiveServer, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "EAS_ENDPOINT": live_api.url,
        "EAS_TOKEN": ADMIN,
        "HOME": "/nonexistent",
    }
    return subprocess.Popen(
        [str(EASCMD), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_previous_shows_the_run_before_the_last_restart(
    live_api: LiveServer, service: Path
) -> None:
    proc = eascmd(live_api, "logs", "triton_test", "--previous")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out == f"{START_MARKER}0 on port 8000\nloading\nSegmentation fault\n"
    proc = eascmd(live_api, "logs", "triton_test", "--previous", "--tail", "1")
    assert proc.communicate(timeout=30)[0] == "Segmentation fault\n"


def test_previous_of_a_replica_that_never_restarted_is_a_clear_404(
    live_api: LiveServer, service: Path
) -> None:
    service.write_text(f"{START_MARKER}0 on port 8000\nready\n")
    proc = eascmd(live_api, "logs", "triton_test", "--previous")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "has not restarted" in err


def test_follow_prints_the_tail_then_each_line_as_it_is_written(
    live_api: LiveServer, service: Path
) -> None:
    proc = eascmd(live_api, "logs", "triton_test", "-f", "--tail", "1")
    assert proc.stdout is not None
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")))  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(lambda: seen == ["ready\n"], 15, what="the tail")
        for i in range(3):
            with service.open("a") as f:
                f.write(f"request {i}\n")
            line = f"request {i}\n"
            wait_until(lambda: seen[-1:] == [line], 5, what=line)  # noqa: B023
        assert proc.poll() is None  # still following
    finally:
        proc.terminate()
        proc.wait(10)
        reader.join(10)
    assert seen == ["ready\n", "request 0\n", "request 1\n", "request 2\n"]


def test_follow_and_previous_exclude_each_other_and_a_missing_replica_is_404(
    live_api: LiveServer, service: Path
) -> None:
    proc = eascmd(live_api, "logs", "triton_test", "-f", "--previous")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "not allowed with" in err  # argparse, before any call
    auth = {"Authorization": f"Bearer {ADMIN}"}
    url = f"{live_api.url}/api/v2/services/local/triton_test/logs"
    r = httpx.get(url, params={"follow": "true", "previous": "true"}, headers=auth)
    assert r.status_code == 400 and "exclude each other" in r.text
    started = time.monotonic()
    r = httpx.get(url, params={"follow": "true", "replica": 7}, headers=auth)
    assert r.status_code == 404 and time.monotonic() - started < 5  # not a stream


async def test_a_followed_log_stops_being_read_when_the_caller_stops(tmp_path: Path) -> None:
    folder = tmp_path / "logs" / "svc"
    folder.mkdir(parents=True)
    (folder / "0.log").write_text("a\nb\n")
    follow = LocalLogs(tmp_path).follow("svc", None, 5)
    assert await anext(follow) == "a\nb\n"
    await follow.aclose()  # type: ignore[attr-defined]  # closes the file
