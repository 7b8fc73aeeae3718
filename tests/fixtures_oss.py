"""Pytest fixtures for the local OSS stand-in (``testing/oss_server.py``); a plugin loaded by
``tests/conftest.py``.

Putting the example Triton models in OSS and pulling them, e.g. in a Triton test::

    def test_serves_from_oss(oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path):
        # oss_model_repo == "oss://triton-model-repo/models", holding examples/models
        # oss_env set OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET / OSS_ENDPOINT for this test
        pull(oss_model_repo, tmp_path / "repo")  # or: openeas processor run triton -- ...

For a subprocess, pass ``{**os.environ, **oss_env}`` as its environment. Other contents go in
with :func:`upload_dir` (``upload_dir(oss_server, BUCKET, "my/prefix", some_dir)``) or
:func:`oss_bucket` (an ``oss2.Bucket``). Fixtures:

* ``oss_server`` (session): the running :class:`~testing.oss_server.OssServer` with the AccessKey
  ``ACCESS_KEY_ID``/``ACCESS_KEY_SECRET``, an STS key ``STS_KEY_ID``/``STS_KEY_SECRET`` that
  must send ``STS_TOKEN``, and the bucket ``BUCKET`` (every key may read and write it).
* ``oss_model_repo`` (session): uploads ``examples/models`` (minus ``__pycache__``) to
  ``oss://triton-model-repo/models`` once and returns that URI.
* ``oss_env`` (function): the ``OSS_*`` variables for the plain AccessKey, set with
  monkeypatch (``OSS_SESSION_TOKEN`` and ``OSS_REGION`` removed); also resets the stand-in's
  faults and counters so each test starts clean.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import oss2
import pytest

from testing.oss_server import OssServer

ACCESS_KEY_ID = "LTAI5tOpenEASTestKey01"
ACCESS_KEY_SECRET = "openeas-test-secret-0123456789"
STS_KEY_ID = "STS.NTestTemporaryKey01"
STS_KEY_SECRET = "openeas-sts-secret-0123456789"
STS_TOKEN = "CAIS-openeas-test-security-token"
BUCKET = "triton-model-repo"
MODELS_PREFIX = "models"
EXAMPLE_MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"


def oss_bucket(server: OssServer, bucket: str = BUCKET) -> oss2.Bucket:
    """An ``oss2.Bucket`` on the stand-in, signed with the plain test AccessKey."""
    return oss2.Bucket(oss2.Auth(ACCESS_KEY_ID, ACCESS_KEY_SECRET), server.endpoint, bucket)


def upload_dir(
    server: OssServer,
    bucket: str,
    prefix: str,
    path: Path,
    *,
    skip: Iterable[str] = ("__pycache__",),
) -> list[str]:
    """Upload every file under ``path`` to ``oss://bucket/prefix/<relative path>`` with oss2,
    skipping files inside directories named in ``skip``; returns the keys, sorted."""
    client = oss_bucket(server, bucket)
    base = prefix.strip("/")
    skipped = set(skip)
    keys = []
    for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        relative = file.relative_to(path)
        if skipped.intersection(relative.parts[:-1]):
            continue
        key = f"{base}/{relative.as_posix()}" if base else relative.as_posix()
        client.put_object_from_file(key, str(file))
        keys.append(key)
    return keys


@pytest.fixture(scope="session")
def oss_server() -> Iterator[OssServer]:
    with OssServer() as server:
        server.add_credential(ACCESS_KEY_ID, ACCESS_KEY_SECRET)
        server.add_credential(STS_KEY_ID, STS_KEY_SECRET, token=STS_TOKEN)
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(scope="session")
def oss_model_repo(oss_server: OssServer) -> str:
    upload_dir(oss_server, BUCKET, MODELS_PREFIX, EXAMPLE_MODELS)
    return f"oss://{BUCKET}/{MODELS_PREFIX}"


@pytest.fixture
def oss_env(oss_server: OssServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """OSS credentials in the environment, and the shared stand-in without faults or
    counters before and after the test (a fault left queued would fail the next file's)."""
    oss_server.reset()
    env = {
        "OSS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "OSS_ACCESS_KEY_SECRET": ACCESS_KEY_SECRET,
        "OSS_ENDPOINT": oss_server.endpoint,
    }
    for name in ("OSS_SESSION_TOKEN", "OSS_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert os.environ["OSS_ENDPOINT"] == oss_server.endpoint
    yield env
    oss_server.reset()
