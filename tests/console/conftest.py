"""Console fixtures: the control plane (API, reconciler, a runtime whose replicas are ready
at once) served on a loopback port, and Debian's chromium driven by Playwright.

Playwright cannot download its own browser here, so it is pointed at ``/usr/bin/chromium``;
where that is missing and we are root (CI), the set-up installs Debian's package, else the
browser tests skip saying how to get it (fail, with ``OPENEAS_REQUIRE_BROWSER=1`` as in CI).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane.api.app import create_app
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.reconcile.reconciler import Reconciler
from controlplane.runtime.base import DesiredReplicaSet, Notify, ReplicaStatus
from controlplane.settings import Settings
from controlplane.store import migrate
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import from_settings
from controlplane.store.services import Services
from testing.waiting import wait_until
from tests.controlplane.conftest import (  # noqa: F401 (fixtures)
    ADMIN,
    LiveServer,
    autoscaling,
    client,
    live_api,
    settings,
)
from tests.controlplane.test_eascmd_cli import eascmd  # noqa: F401
from tests.controlplane.test_reconciler import FakeRuntime
from tests.gateway.conftest import echo, echo_server, lt, make_gateway  # noqa: F401

CHROMIUM = Path("/usr/bin/chromium")
INSTALL_TIMEOUT_S = 900


def ensure_chromium() -> str | None:
    """The path of Debian's chromium, installing it when missing and allowed; None when
    the browser tests must skip."""
    if CHROMIUM.exists():
        return str(CHROMIUM)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        subprocess.run(
            command, env=env, check=False, timeout=INSTALL_TIMEOUT_S, capture_output=True
        )
    return str(CHROMIUM) if CHROMIUM.exists() else None


class ReadyRuntime(FakeRuntime):
    """Replicas that are Running as soon as they are applied, with a log to tail."""

    async def apply(self, desired: DesiredReplicaSet) -> None:
        await super().apply(desired)
        self.replicas[desired.service] = [
            ReplicaStatus(
                r.name, r.template_hash, "Running", endpoint=f"http://10.0.0.{i + 7}:8000"
            )
            for i, r in enumerate(self.replicas[desired.service])
        ]
        self.notify(desired.service)

    async def logs(
        self, service: str, replica: int | None, tail: int, *, previous: bool = False
    ) -> str:
        if not self.replicas.get(service) or previous:
            raise FileNotFoundError(f"no replica of {service!r}")
        lines = [
            "I1201 04:30:01 server.cc:662] successfully loaded 'inception_graphdef'",
            "I1201 04:30:01 http_server.cc:4601] Started HTTPService at 0.0.0.0:8000",
            "I1201 04:30:01 http_server.cc:315] Started Metrics Service at 0.0.0.0:8002",
        ]
        return "\n".join(lines[-tail:]) + "\n"

    async def follow(self, service: str, replica: int | None, tail: int) -> AsyncIterator[str]:
        yield await self.logs(service, replica, tail)


class Platform:
    """The control plane as ``openeas controlplane`` runs it, with :class:`ReadyRuntime`."""

    def __init__(self, data: Path) -> None:
        self.settings = Settings(
            data_dir=data, admin_token=ADMIN, public_url="http://gateway.example:8080"
        )
        migrate.upgrade(self.settings.sqlalchemy_url)
        self.engine = make_engine(self.settings.sqlalchemy_url)
        sessions = make_sessions(self.engine)
        sealer = from_settings(self.settings.secret_key, self.settings.data_dir)
        self.autoscaling = Autoscaling(sessions, Services(sessions, "local", sealer))
        self.runtime = ReadyRuntime(lambda _: None)

        def runtime(notify: Notify) -> ReadyRuntime:
            self.runtime.notify = notify
            return self.runtime

        self.reconciler = Reconciler(
            sessions,
            runtime,
            "local",
            poll_seconds=0.2,
            lease_ttl=3.0,
            autoscaling=self.autoscaling,
        )
        app = create_app(
            self.settings, self.engine, log_source=self.runtime, autoscaling=self.autoscaling
        )
        self.live = LiveServer(app, beside=self.reconciler.run)
        self.url = self.live.url
        wait_until(lambda: self.autoscaling.signals.leading, 30, what="leading")
        self.api = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"})

    def create(self, name: str, instances: int = 1, **metadata: Any) -> None:
        spec = {
            "name": name,
            "processor": "triton",
            "processor_params": ["--model-repository=oss://models/" + name],
            "metadata": {"instance": instances, "cpu": 2, "memory": 4000} | metadata,
        }
        r = self.api.post("/api/v2/services", json=spec)
        assert r.status_code == 200, r.text

    def status(self, name: str) -> tuple[str, int]:
        s = self.api.get(f"/api/v2/services/local/{name}").json()
        return s["Status"], s["RunningInstance"]

    def stop(self) -> None:
        self.api.close()
        try:
            self.live.stop()
        finally:
            self.engine.dispose()


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    p = Platform(tmp_path_factory.mktemp("console"))
    yield p
    p.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = ensure_chromium()
    if path is None:
        reason = "no /usr/bin/chromium and not root to install it: run 'apt-get install chromium'"
        if os.environ.get("OPENEAS_REQUIRE_BROWSER") == "1":  # CI: a skip would hide the tests
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    # As the pages' own default below: on two cores shared with the rest of the suite a
    # round trip to the control plane has outlasted expect()'s 5 s (a flaky "not visible").
    expect.set_options(timeout=15_000)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(15_000)
    p = context.new_page()
    yield p
    context.close()
