"""The warm-up request files named by a service's ``warm_up_data_path``, parsed.

:mod:`processors.triton.warmup` calls :func:`load` on the local copy (a folder, or one file)
before it replays the requests to a new replica. The format (docs/spec.md, "Warm-up"):

- ``<model>/<name>.json``: a Triton JSON infer body (``{"inputs": [...]}``) for ``<model>``;
- ``<model>/<name>.bin``: a binary-tensor infer body, the JSON header followed by the raw
  tensors. The header's length (``Inference-Header-Content-Length``) is the length of the
  leading JSON object, so no sidecar is needed; the bytes after it must add up to the
  inputs' ``binary_data_size``;
- a file outside a model folder (or ``warm_up_data_path`` naming one file) names its model
  before the first dot: ``<model>.json``, ``<model>.2.bin``.

Files are replayed in path order, each once. Names starting with ``.`` (the pull's manifest)
are skipped. :func:`parse` is pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

SUFFIXES = (".json", ".bin")


class WarmUpFileError(ValueError):
    """A request file that cannot be replayed; the message names the file and the fix."""


@dataclass(frozen=True)
class WarmUpRequest:
    source: str  # path relative to warm_up_data_path, for messages
    model: str
    body: bytes
    header_length: int | None  # Inference-Header-Content-Length, for a binary body


def load(location: Path) -> list[WarmUpRequest]:
    """Every request under ``location`` (a folder, or one file), in path order."""
    if location.is_file():
        return [parse(location.name, location.read_bytes())]
    if not location.is_dir():
        raise WarmUpFileError(f"warm_up_data_path {location} does not exist: check the path")
    files = sorted(
        p
        for p in location.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(location).parts)
    )
    if not files:
        raise WarmUpFileError(
            f"warm_up_data_path {location} holds no request files: put <model>/<n>.json there"
        )
    return [parse(p.relative_to(location).as_posix(), p.read_bytes()) for p in files]


def parse(source: str, data: bytes) -> WarmUpRequest:
    """One request file: its model (from the path) and its infer body."""
    path = PurePosixPath(source)
    if path.suffix not in SUFFIXES:
        raise WarmUpFileError(
            f"warm-up file {source}: unknown kind; name it <model>/<n>.json (a JSON infer "
            "body) or <model>/<n>.bin (a binary-tensor infer body)"
        )
    model = path.parts[0] if len(path.parts) > 1 else path.name.split(".", 1)[0]
    if not model:
        raise WarmUpFileError(f"warm-up file {source}: no model name; use <model>/<n>{path.suffix}")
    if path.suffix == ".json":
        _header(source, data)
        return WarmUpRequest(source, model, data, None)
    header, length = _leading_object(source, data)
    expected = sum(_binary_size(source, i) for i in header["inputs"])
    if len(data) - length != expected:
        raise WarmUpFileError(
            f"warm-up file {source}: {len(data) - length} bytes follow the JSON header but its "
            f"inputs' binary_data_size add up to {expected}; write the header, then each "
            "binary input's bytes in order"
        )
    return WarmUpRequest(source, model, data, length)


def _header(source: str, data: bytes) -> dict[str, Any]:
    try:
        header = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise WarmUpFileError(
            f"warm-up file {source} is not JSON ({e}); binary-tensor bodies go in .bin files"
        ) from e
    return _checked(source, header)


def _leading_object(source: str, data: bytes) -> tuple[dict[str, Any], int]:
    # latin-1 maps each byte to one character, so the decoder's end index is a byte count
    # (the UTF-8 of the header passes through as characters JSON strings allow).
    try:
        header, end = json.JSONDecoder().raw_decode(data.decode("latin-1"))
    except ValueError as e:
        raise WarmUpFileError(
            f"warm-up file {source} does not start with a JSON infer header ({e})"
        ) from e
    return _checked(source, header), end


def _checked(source: str, header: Any) -> dict[str, Any]:
    if not isinstance(header, dict) or not isinstance(header.get("inputs"), list):
        raise WarmUpFileError(
            f'warm-up file {source}: an infer body is an object with "inputs": '
            '{"inputs": [{"name": ..., "shape": ..., "datatype": ..., "data": ...}]}'
        )
    return header


def _binary_size(source: str, tensor: Any) -> int:
    parameters = tensor.get("parameters") if isinstance(tensor, dict) else None
    size = (parameters or {}).get("binary_data_size", 0) if isinstance(parameters, dict) else 0
    if not isinstance(size, int) or size < 0:
        raise WarmUpFileError(
            f"warm-up file {source}: binary_data_size {size!r} is not a byte count"
        )
    return size
