"""The documentation stays true to the code.

Fenced blocks marked ```` ```sh test ```` run with bash in a scratch directory (HOME there
too, so ``eascmd config`` writes nowhere else; ``examples/`` linked in), and blocks marked
```` ```yaml helm-values ```` go through the chart and kubernetes-validate. The references
are checked against what they describe: every ``eascmd`` command and flag, every settings
variable, every status reason the runtimes set, the generated REST reference, and every
relative link.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from controlplane.runtime import local
from controlplane.runtime.kubernetes import client as k8s_client
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.settings import Settings
from eascmd.cli import parser as eascmd_parser
from gateway import native
from gateway.settings import GatewaySettings
from processors import doorbell, progress, repository
from processors.base import READY_FILE_ENV
from processors.model_cache import wire as cache_wire
from processors.storage import node_cache, oss
from processors.triton import binary
from tests.deploy.chart import ROOT, render
from tests.deploy.test_settings_env import env_names

DOCS = ROOT / "docs"
PAGES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```$", re.M | re.S)


def blocks(marker: str) -> list[tuple[str, str]]:
    """``(id, body)`` of every fenced block whose info string is ``marker``."""
    found = []
    for page in PAGES:
        for n, m in enumerate(FENCE.finditer(page.read_text()), 1):
            if f"{m[1]}{m[2]}".strip() == marker:
                found.append((f"{page.name}#{n}", m[3]))
    return found


SH_BLOCKS = blocks("sh test")
VALUES_BLOCKS = blocks("yaml helm-values")


def test_the_docs_have_executable_examples() -> None:
    assert len(SH_BLOCKS) >= 3 and len(VALUES_BLOCKS) >= 3


@pytest.mark.parametrize(("where", "script"), SH_BLOCKS, ids=[b[0] for b in SH_BLOCKS])
def test_shell_examples_run(where: str, script: str, tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENEAS_", "EAS_", "OSS_", "KUBE"))
    }
    env |= {"HOME": str(tmp_path), "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, f"{where}:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize(("where", "text"), VALUES_BLOCKS, ids=[b[0] for b in VALUES_BLOCKS])
def test_values_examples_render_valid_objects(where: str, text: str) -> None:
    objects = render(yaml.safe_load(text))
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # no schema in kubernetes-validate: tests/deploy/test_monitoring.py
        assert kubernetes_validate.validate(obj, "1.33.0", strict=True)


# -- references ---------------------------------------------------------------------------------


def _sections(page: Path) -> dict[str, str]:
    """Text under each ``### `eascmd <command>` `` heading (a heading may name several)."""
    text = page.read_text()
    parts = re.split(r"^### (.*)$", text, flags=re.M)
    sections: dict[str, str] = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        for command in re.findall(r"`eascmd (\w+)`", heading):
            sections[command] = body
    return sections


def test_eascmd_reference_covers_every_command_and_flag() -> None:
    sections = _sections(DOCS / "eascmd.md")
    [subparsers] = [
        a for a in eascmd_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    assert set(sections) == set(subparsers.choices)
    for command, sub in subparsers.choices.items():
        for action in sub._actions:
            for flag in action.option_strings:
                mentioned = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", sections[command])
                assert mentioned or flag in ("-h", "--help"), f"eascmd {command} {flag}"


# Read by the test suite's fixtures, not by a deployable.
TEST_ONLY = {"OPENEAS_TEST_POSTGRES_URL", "OPENEAS_REQUIRE_POSTGRES"}


def test_configuration_names_every_variable_and_no_other() -> None:
    text = (DOCS / "configuration.md").read_text()
    names = (
        (env_names(Settings) - {"OPENEAS_K8S"})
        | env_names(KubernetesSettings)
        | env_names(GatewaySettings)
        | {binary.ENV_BINARY, binary.ENV_CACHE, repository.ENV_MODEL_CACHE}
        | {oss.ENV_KEY_ID, oss.ENV_KEY_SECRET, oss.ENV_SESSION_TOKEN, oss.ENV_ENDPOINT}
        | {oss.ENV_REGION, node_cache.ENV_URL, READY_FILE_ENV, progress.ENV_FILE}
        | {cache_wire.TOKEN_ENV, native.PURE_ENV, doorbell.ENV_FD}
    )
    missing = sorted(n for n in names if f"`{n}`" not in text)
    assert missing == []
    stale = set(re.findall(r"`(OPENEAS_[A-Z0-9_]+)`", text)) - names - TEST_ONLY
    assert sorted(stale) == []


# Quoted CamelCase words in the modules that set replica and service reasons which are not
# reasons: Kubernetes kinds and fields, states, condition types, watch event types.
NOT_REASONS = {
    "ALL", "AlwaysAllow", "BOOKMARK", "Background", "ClusterIP", "ConfigMap", "DELETED",
    "Deleting", "Event",
    "Deployment", "ERROR", "Failed", "FallbackToLogsOnError", "False", "KUBECONFIG", "Memory",
    "Opaque", "PYTHONUNBUFFERED", "Pending", "Pod", "PodDisruptionBudget", "PodScheduled", "Ready",
    "ReplicaFailure", "RollingUpdate", "Running", "RuntimeDefault", "ScheduleAnyway", "Secret",
    "Service", "Stopped", "Stopping", "Succeeded", "TCP", "Terminating", "True",
    "Updating", "Waiting",
}  # fmt: skip
KUBERNETES = ROOT / "controlplane" / "runtime" / "kubernetes"
REASON_MODULES = [
    ROOT / "controlplane" / "runtime" / "local.py",
    ROOT / "controlplane" / "runtime" / "base.py",
    ROOT / "controlplane" / "reconcile" / "status.py",
    *(KUBERNETES / f"{m}.py" for m in ("client", "manifests", "replicas", "runtime")),
]
# Reasons the API server's Status carries for the codes the client treats as permanent.
API_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 422: "Invalid"}


def test_troubleshooting_explains_every_reason() -> None:
    assert set(local.PERMANENT_EXITS.values()).isdisjoint(NOT_REASONS)
    source = Path(k8s_client.__file__).read_text()
    [permanent] = re.findall(r"if code in \(([\d, ]+)\):", source)
    assert {int(c) for c in permanent.split(",")} | {404} == set(API_REASONS)
    reasons = set(API_REASONS.values())
    for module in REASON_MODULES:
        reasons |= set(re.findall(r'"([A-Z][A-Za-z]+)"', module.read_text())) - NOT_REASONS
    text = (DOCS / "troubleshooting.md").read_text()
    assert sorted(r for r in reasons if f"`{r}`" not in text) == []
    for code in ("2", "3", "4", "75", "127", "130"):
        assert f"| {code} |" in text


def test_the_api_reference_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    generator = runpy.run_path(str(DOCS / "gen_api.py"))
    assert generator["main"](["--check"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.name}: {target}"
