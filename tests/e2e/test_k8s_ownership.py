"""A control plane started on the wrong database, end to end: real ``openeas controlplane``
and ``openeas gc`` processes against the Kubernetes API stand-in.

The first database's control plane creates a service, then stops. A second one on an empty
database, same release, refuses to reconcile: ``/healthz`` stays 200, the log says why, and
the first installation's Deployment is left exactly as it was; ``openeas gc --confirm`` on
that database refuses too. Back on the right database, ``openeas gc`` finds no orphans.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from controlplane.runtime.kubernetes import ownership
from testing.waiting import wait_until
from tests.e2e.test_k8s_outage import BIN, SPEC, Api, Cluster

pytestmark = pytest.mark.slow


def gc(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "openeas"), "gc", *args],
        env=cluster._env("gc"),
        capture_output=True,
        text=True,
        timeout=60,
    )


def unchanged(cluster: Cluster) -> tuple[str, object, object]:
    """The one Deployment's identity, labels and spec (its status moves with its pods)."""
    [deployment] = cluster.api.list("deployments")
    metadata = deployment["metadata"]
    return metadata["uid"], metadata["labels"], deployment["spec"]


def test_an_empty_database_deletes_nothing(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, f"sqlite:///{tmp_path / 'first.db'}")
    try:
        cluster.migrate()
        first = cluster.controlplane()
        Api(first.url).create({**SPEC, "metadata": {**SPEC["metadata"], "instance": 1}})
        wait_until(lambda: cluster.api.list("deployments"), 30, what="the Deployment")
        deployment = unchanged(cluster)
        first.popen.terminate()
        first.popen.wait(30)

        cluster.env["OPENEAS_DATABASE_URL"] = f"sqlite:///{tmp_path / 'empty.db'}"
        cluster.migrate()
        wrong = cluster.controlplane()
        wait_until(lambda: "refusing to reconcile" in wrong.tail(), 30, what="the refusal")
        assert httpx.get(wrong.url + "/healthz").status_code == 200
        time.sleep(2.0)  # resyncs and lease renewals come and go
        assert unchanged(cluster) == deployment
        refused = gc(cluster, "--confirm")
        assert refused.returncode == 1 and "refusing to reconcile" in refused.stdout
        assert unchanged(cluster) == deployment
        wrong.popen.terminate()
        wrong.popen.wait(30)

        cluster.env["OPENEAS_DATABASE_URL"] = f"sqlite:///{tmp_path / 'first.db'}"
        listed = gc(cluster)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert "no orphans among 1 services" in listed.stdout
        record = cluster.api.get("configmaps", ownership.config_map_name("openeas"))
        assert record is not None
    finally:
        cluster.stop()
