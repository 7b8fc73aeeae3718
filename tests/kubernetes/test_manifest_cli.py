"""``openeas manifests <service.json>``: the seed's config as pasted from the blog gets the
friendly error (no traceback); a clean version prints objects that pass
``kubernetes-validate --strict``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from controlplane.manifest_cli import main
from tests.kubernetes.conftest import RESOURCE_GROUPS

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_triton.config"
CLEAN = {
    "name": "triton_test",
    "processor": "triton",
    "processor_params": [
        "--model-repository=oss://triton-model-repo/models",
        "--allow-http=true",
    ],
    "metadata": {"instance": 1, "cpu": 4, "gpu": 1, "memory": 10000, "resource": "eas-r-a10"},
}


@pytest.fixture(autouse=True)
def k8s_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENEAS_K8S_NAMESPACE", "OPENEAS_K8S_PROCESSOR_IMAGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENEAS_K8S_RESOURCE_GROUPS", json.dumps(RESOURCE_GROUPS))


def write(tmp_path: Path, body: object) -> str:
    path = tmp_path / "triton.config"
    path.write_text(json.dumps(body, indent=2))
    return str(path)


def test_the_seed_config_as_pasted_gets_a_friendly_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([str(SEED)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"openeas manifests: {SEED} is not valid JSON")
    assert 'type straight quotes " instead' in err
    assert "dash – before a flag: type -- instead" in err
    assert "Traceback" not in err


def test_a_clean_seed_prints_valid_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([write(tmp_path, CLEAN), "--namespace", "serving"]) == 0
    out, _ = capsys.readouterr()
    docs = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "PodDisruptionBudget"]
    for doc in docs:
        assert doc["metadata"]["namespace"] == "serving"
        assert kubernetes_validate.validate(doc, "1.33", strict=True)
    pod = docs[0]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"openeas.io/pool": "a10"}
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_the_blogs_placeholder_resource_names_the_known_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {**CLEAN, "metadata": {**CLEAN["metadata"], "resource": "<your resource id>"}}  # type: ignore[dict-item]
    assert main([write(tmp_path, body)]) == 1
    _, err = capsys.readouterr()
    assert "metadata.resource: unknown resource group '<your resource id>'" in err
    assert "eas-r-a10, eas-r-cpu" in err


def test_an_invalid_spec_lists_its_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {**CLEAN, "replicas": 2, "processor_params": ["--http-port=9000"]}
    assert main([write(tmp_path, body)]) == 1
    _, err = capsys.readouterr()
    assert "is not a valid service spec" in err
    assert "replicas: unknown field" in err
    assert "Traceback" not in err


def test_openeas_manifests_output_passes_the_kubernetes_validate_command(tmp_path: Path) -> None:
    config = write(tmp_path, CLEAN)
    printed = subprocess.run(
        [sys.executable, "-m", "openeas.cli", "manifests", config],
        capture_output=True,
        text=True,
        check=False,
    )
    assert printed.returncode == 0, printed.stderr
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(printed.stdout)
    validate = [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", "1.29", "-k", "1.33"]
    checked = subprocess.run(
        [*validate, str(manifests)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("passed") == 6  # three objects, two versions
