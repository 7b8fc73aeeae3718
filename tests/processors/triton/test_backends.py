"""The backend check before tritonserver starts: what each model's config names (backend or
platform), what a backends folder lacks, and the one-line, permanent refusal a replica gives
for the seed's TensorFlow model on an image without the TensorFlow backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from openeas import cli as openeas_cli
from processors import exits
from processors.triton import backends
from tests.fixtures_triton import EXAMPLE_MODELS


def repository(tmp_path: Path, **configs: str) -> Path:
    root = tmp_path / "models"
    for model, config in configs.items():
        (root / model / "1").mkdir(parents=True)
        (root / model / "config.pbtxt").write_text(config)
    return root


def folder(tmp_path: Path, *names: str) -> Path:
    root = tmp_path / "-".join(("backends", *names))
    for name in names:
        (root / name).mkdir(parents=True)
    return root


@pytest.mark.parametrize(
    ("config", "backend"),
    [
        ('platform: "tensorflow_graphdef"\nmax_batch_size: 8', "tensorflow"),
        ('name: "m"\nplatform: "tensorflow_savedmodel"', "tensorflow"),
        ('platform: "onnxruntime_onnx"', "onnxruntime"),
        ('platform: "pytorch_libtorch"', "pytorch"),
        ('platform: "tensorrt_plan"', "tensorrt"),
        ('backend: "python"', "python"),
        ('  backend : "vllm"', "vllm"),
        ("max_batch_size: 8  # auto-complete fills the rest", None),
        ('# platform: "tensorflow_graphdef"\nbackend: "onnxruntime"', "onnxruntime"),
    ],
)
def test_what_a_model_needs(tmp_path: Path, config: str, backend: str | None) -> None:
    needed = backends.needed(repository(tmp_path, m=config))
    assert needed == ({"m": backend} if backend else {})


def test_the_example_models_need_only_the_python_backend() -> None:
    assert set(backends.needed(EXAMPLE_MODELS).values()) == {"python"}
    assert {"add_sub", "inception_graphdef", "identity", "repeat"} == set(
        backends.needed(EXAMPLE_MODELS)
    )


def test_missing_names_every_model_and_the_fix(tmp_path: Path) -> None:
    repo = repository(
        tmp_path,
        inception_graphdef='platform: "tensorflow_graphdef"',
        resnet='platform: "onnxruntime_onnx"',
        add_sub='backend: "python"',
    )
    assert backends.missing(repo, folder(tmp_path, "python", "onnxruntime", "tensorflow")) is None
    problem = backends.missing(repo, folder(tmp_path, "python", "onnxruntime"))
    assert problem is not None
    assert "inception_graphdef (tensorflow)" in problem and "resnet" not in problem
    assert "TRITON_VERSION=25.02" in problem and "processorImage" in problem


def test_the_backend_directory_is_the_servers(tmp_path: Path) -> None:
    assert backends.directory([f"--backend-directory={tmp_path}"]) == tmp_path
    assert backends.directory([]) == Path("/opt/tritonserver/backends")


def test_a_replica_refuses_a_model_its_server_cannot_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The wheel's tritonserver has no TensorFlow backend, as NVIDIA's images after 25.02:
    the seed's real GraphDef config fails at once, permanently, before the server starts."""
    repo = repository(tmp_path, inception_graphdef='platform: "tensorflow_graphdef"')
    argv = ["processor", "run", "triton", "--model-cache", str(tmp_path / "cache"), "--"]
    code = openeas_cli.main([*argv, f"--model-repository={repo}"])
    assert code == exits.BACKEND_MISSING and code in exits.PERMANENT
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("openeas: this image has no backend for models inception_graphdef")
