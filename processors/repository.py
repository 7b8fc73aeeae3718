"""The local model repository a replica serves: a local path as given, or a pulled copy.

``openeas processor run triton`` calls :func:`local_repository` before starting tritonserver,
and ``openeas processor pull`` calls :func:`pull`; both turn storage errors into
:class:`PullFailed`, whose ``exit_code`` is the one :mod:`processors.exits` documents.
Remote repositories land in a model cache shared by the replicas on one host (one folder per
endpoint+bucket+prefix). ``processors.storage.pull`` makes sharing safe: it locks the folder,
so two replicas starting together take turns and the second finds the copy current (files
whose ETags have not changed are not fetched again), and it swaps a pull into place
atomically.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from processors import exits, progress, storage

if TYPE_CHECKING:
    from processors.storage.pull import PullReport

ENV_MODEL_CACHE = "OPENEAS_MODEL_CACHE"


class PullFailed(Exception):
    """The repository cannot be had; ``temporary`` says whether retrying may help."""

    def __init__(self, reason: str, *, temporary: bool) -> None:
        super().__init__(reason)
        self.temporary = temporary

    @property
    def exit_code(self) -> int:
        return exits.PULL_TEMPORARY if self.temporary else exits.PULL_PERMANENT


def default_cache(environ: Mapping[str, str]) -> Path:
    """``OPENEAS_MODEL_CACHE``, else a per-user folder in the temp dir (stable, so replicas
    on one host share it)."""
    configured = environ.get(ENV_MODEL_CACHE)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"openeas-models-{os.getuid()}"


def slot(cache: Path, uri: str, endpoint: str | None) -> Path:
    """The cache folder for ``uri``: readable, and unique per endpoint and location."""
    # The parsed form, so oss://b/m, oss://b/m/ and oss://b//m share one folder.
    location = str(storage.parse_uri(uri)).removeprefix("oss://").rstrip("/")
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", location).strip("-.")[:80] or "repository"
    digest = hashlib.sha256(f"{endpoint or ''}\0{location}".encode()).hexdigest()[:12]
    return cache / f"{readable}-{digest}"


def local_repository(uri: str, cache: Path, *, endpoint: str | None) -> Path:
    """A local directory holding the repository named by ``uri`` (pulled if remote)."""
    local = storage.resolve_local(uri)
    if local is not None:
        if not local.is_dir():
            raise PullFailed(f"model repository {local} is not a directory", temporary=False)
        return local
    dest = slot(cache, uri, endpoint)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PullFailed(f"cannot use the model cache {cache}: {e}", temporary=False) from e
    pull(uri, dest, endpoint=endpoint)
    return dest


def pull(uri: str, dest: Path, *, endpoint: str | None) -> PullReport:
    """:func:`processors.storage.pull.pull`, its failures as :class:`PullFailed`."""
    # Imported here: only a remote repository needs the OSS client (see processors.storage).
    from processors.storage.node_cache import NodeCache
    from processors.storage.pull import pull as fetch

    # Progress goes where the runtime looks for it (OPENEAS_PROGRESS_FILE), else to stderr;
    # read here so the run and the pull command both report it.
    sink = progress.sink_from(os.environ)
    try:
        node_cache = NodeCache.from_env(os.environ)  # the node's model cache, on Kubernetes
        return fetch(uri, dest, endpoint=endpoint, progress=sink, node_cache=node_cache)
    except storage.PermanentStorageError as e:
        raise PullFailed(str(e), temporary=False) from e
    except storage.TemporaryStorageError as e:
        raise PullFailed(str(e), temporary=True) from e
