"""Does this tritonserver have the backends the repository's models name?

``openeas processor run triton`` asks before starting the server. Backends come with the
image: NVIDIA's images after 25.02 ship no TensorFlow backend, so a TensorFlow model on them
would leave the replica up but the model unloaded, with Triton's complaint deep in its log.
Checked here, it is one line and a permanent exit that names the fix. Reads only each
model's ``config.pbtxt`` ``backend``/``platform``; models without one (auto-complete) pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

DEFAULT_DIRECTORY = Path("/opt/tritonserver/backends")  # NVIDIA's images
# Triton's platform names and the backend each runs on.
PLATFORMS = {
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
}
_FIELD = re.compile(r'^\s*(backend|platform)\s*:\s*"([^"]+)"', re.MULTILINE)
_HINTS = {
    "tensorflow": "NVIDIA ships it up to Triton 25.02: run the service on a processor image "
    "built with TRITON_VERSION=25.02 (a resource group's processorImage), or convert the "
    "model to ONNX or TensorRT",
}


def directory(server_args: Sequence[str]) -> Path:
    """Where this server looks for backends: its ``--backend-directory``, else the image's."""
    for arg in server_args:
        if arg.startswith("--backend-directory="):
            return Path(arg.partition("=")[2])
    return DEFAULT_DIRECTORY


def needed(repository: Path) -> dict[str, str]:
    """Model name -> the backend its config names."""
    out: dict[str, str] = {}
    for config in sorted(repository.glob("*/config.pbtxt")):
        fields = dict(_FIELD.findall(config.read_text(errors="replace")))
        backend = fields.get("backend") or PLATFORMS.get(fields.get("platform", ""), "")
        if backend:
            out[config.parent.name] = backend
    return out


def missing(repository: Path, backends: Path) -> str | None:
    """Why some model cannot load here (one line), or None when every backend is there."""
    absent = {m: b for m, b in needed(repository).items() if not (backends / b).is_dir()}
    if not absent:
        return None
    first = sorted(set(absent.values()))[0]
    models = ", ".join(f"{m} ({b})" for m, b in sorted(absent.items()))
    hint = _HINTS.get(first, f"use a processor image whose tritonserver has the {first} backend")
    return f"this image has no backend for models {models} in {backends}; {hint}"
