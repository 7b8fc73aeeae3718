"""What ``eascmd`` shows while a service comes up: one live line on a terminal, plain
lines on a pipe, the progress column of ``desc``, and the completion script."""

from __future__ import annotations

import io
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from contract.progress import Progress
from eascmd import cli, completion, render
from eascmd.live import LiveLine


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_pipe_gets_a_line_per_phase_and_otherwise_every_few_seconds() -> None:
    out, clock = io.StringIO(), Clock()
    live = LiveLine(out, tty=False, every=10.0, clock=clock)
    live.show("pulling 1", "pulling")
    clock.now = 5
    live.show("pulling 2", "pulling")  # too soon: dropped
    live.show("loading", "loading")  # a new phase: at once
    clock.now = 16
    live.show("loading 2", "loading")
    assert out.getvalue() == "pulling 1\nloading\nloading 2\n"


def test_a_terminal_gets_one_line_rewritten_in_place() -> None:
    out = io.StringIO()
    live = LiveLine(out, tty=True)
    live.show("pulling 1", "pulling")
    live.show("pulling 1", "pulling")  # unchanged: nothing written
    live.show("pulling 2", "pulling")
    live.clear()
    assert out.getvalue() == "\r\033[Kpulling 1\r\033[Kpulling 2\r\033[K"


def replica(n: int, state: str, progress: Progress | None) -> dict[str, Any]:
    return {
        "name": f"svc-{n}",
        "state": state,
        "endpoint": None,
        "restarts": 0,
        "message": "",
        "progress": progress.as_dict() if progress else None,
    }


PULLING = Progress("pulling", 3, 10, 1_200_000_000, 4_000_000_000, 25e6, 112.0)
LOADING = Progress("loading", 10, 10, 4_000_000_000, 4_000_000_000, 25e6, 0.0)


def service(status: str, *replicas: dict[str, Any]) -> dict[str, Any]:
    running = sum(r["state"] == "Running" for r in replicas)
    return {
        "ServiceName": "svc", "Region": "local", "Status": status, "Reason": "", "Message": "",
        "TotalInstance": len(replicas), "PendingInstance": len(replicas) - running,
        "RunningInstance": running, "Generation": 1, "ObservedGeneration": 1,
        "InternetEndpoint": "http://gw/api/predict/svc", "IntranetEndpoint": "http://gw",
        "CreateTime": "t", "UpdateTime": "t", "Replicas": list(replicas),
        "ServiceConfig": {"processor": "triton", "processor_params": []},
    }  # fmt: skip


def test_progress_names_each_pulling_replica() -> None:
    svc = service("Waiting", replica(0, "Pending", PULLING), replica(1, "Pending", LOADING))
    text, kind = render.progress(svc)
    assert text == (
        "replica 0: pulling 1.2 GB of 4.0 GB (30%), 3/10 files, 25.0 MB/s, ETA 1m52s; "
        "replica 1: loading models (pulled 4.0 GB, 10 files)"
    )
    assert kind == "pulling,loading"
    assert render.progress(service("Running", replica(0, "Running", None))) == ("", "")


def test_desc_shows_progress_per_replica() -> None:
    out = render.describe(service("Waiting", replica(0, "Pending", PULLING)))
    assert "| Progress " in out and "pulling 1.2 GB of 4.0 GB (30%)" in out


class FakeClient:
    """The statuses a service goes through, one per long-poll; each answer's state is its
    index, and the ``after`` each poll passed is kept."""

    def __init__(self, statuses: list[dict[str, Any]]) -> None:
        self._statuses: Iterator[tuple[int, dict[str, Any]]] = enumerate(statuses)
        self.afters: list[str | None] = []

    def service_path(self, name: str, action: str = "") -> str:
        return name

    def watch(self, path: str, after: str | None, wait: float) -> tuple[dict[str, Any], str | None]:
        assert 0 < wait <= cli.WATCH_S
        self.afters.append(after)
        n, status = next(self._statuses)
        return status, str(n)


def test_wait_goes_from_waiting_through_pulling_and_loading_to_running(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = FakeClient(
        [
            service("Waiting", replica(0, "Pending", None)),
            service("Waiting", replica(0, "Pending", PULLING)),
            service("Waiting", replica(0, "Pending", LOADING)),
            service("Running", replica(0, "Running", None)),
        ]
    )
    # interval: the pace against a control plane without long-polls, never used here
    assert cli.wait(client, "svc", timeout=30, interval=3600) == 0
    assert client.afters == [None, "0", "1", "2"]  # each poll waits past the last answer
    assert capsys.readouterr().out.splitlines() == [
        "[OK] Service is now deploying",
        "[OK] Successfully synchronized resources",
        "[OK] Waiting [Total: 1, Pending: 1, Running: 0]",
        "[..] replica 0: pulling 1.2 GB of 4.0 GB (30%), 3/10 files, 25.0 MB/s, ETA 1m52s",
        "[..] replica 0: loading models (pulled 4.0 GB, 10 files)",
        "[OK] Running [Total: 1, Pending: 0, Running: 1]",
        "[OK] Service is running",
    ]


class OlderServer(FakeClient):
    """A control plane from before long-polls: it answers at once, without a state."""

    def watch(self, path: str, after: str | None, wait: float) -> tuple[dict[str, Any], None]:
        assert after is None
        return super().watch(path, after, wait)[0], None


def test_against_a_server_without_long_polls_it_polls_at_its_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # the module eascmd.cli sleeps with
    client = OlderServer(
        [service("Waiting", replica(0, "Pending", None))] * 2 + [service("Running")]
    )
    assert cli.wait(client, "svc", timeout=30, interval=0.2) == 0
    assert slept == [0.2, 0.2]


WARMING = Progress("warming up", 0, 0, 0, 0, requests_done=1, requests_total=2, started_at=9.0)
WARMED = Progress("warmed up", 0, 0, 0, 0, requests_done=2, requests_total=2, started_at=9.0,
                  warm_up_seconds=1.2)  # fmt: skip


def test_wait_shows_the_warm_up_and_desc_keeps_its_duration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = FakeClient(
        [
            service("Waiting", replica(0, "Pending", LOADING)),
            service("Waiting", replica(0, "Pending", WARMING)),
            service("Running", replica(0, "Running", WARMED)),
        ]
    )
    assert cli.wait(client, "svc", timeout=30, interval=3600) == 0
    assert capsys.readouterr().out.splitlines()[3:] == [
        "[..] replica 0: loading models (pulled 4.0 GB, 10 files)",
        "[..] replica 0: warming up: 1/2 requests replayed",
        "[OK] Running [Total: 1, Pending: 0, Running: 1]",
        "[OK] Service is running",
    ]
    scaling = service("Waiting", replica(0, "Running", WARMED), replica(1, "Pending", PULLING))
    assert render.progress(scaling)[0].startswith("replica 1: pulling")
    out = render.describe(service("Running", replica(0, "Running", WARMED)))
    assert "warmed up: 2 requests replayed in 1s" in out


def test_bash_completion_offers_commands_and_their_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["completion"]) == 0
    script = capsys.readouterr().out

    def complete(*words: str) -> list[str]:
        line = " ".join(["eascmd", *words])
        probe = (
            f"{script}\nCOMP_WORDS=(eascmd {' '.join(words)}); COMP_CWORD={len(words)}\n"
            'COMP_LINE="' + line + '"; _eascmd; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert sorted(complete("li")) == ["lint", "list"]
    assert sorted(complete("lint", "--")) == ["--fix", "--help", "--in-place"]
    assert "--no-wait" in complete("create", "--")
    assert cli.main(["completion", "zsh"]) == 0
    assert capsys.readouterr().out.startswith(completion.ZSH_PRELUDE)
