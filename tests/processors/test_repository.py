"""processors.repository: local repositories in place, remote ones in the model cache."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from processors import exits, repository, storage

pull_module = importlib.import_module("processors.storage.pull")  # the module, not the function


def test_slot_is_stable_readable_and_distinct(tmp_path: Path) -> None:
    one = repository.slot(tmp_path, "oss://bucket/models", None)
    assert one.parent == tmp_path
    assert one.name.startswith("bucket-models-")
    # the same location, however spelled, shares a folder (replicas share a pull)
    assert repository.slot(tmp_path, "oss://bucket/models/", None) == one
    assert repository.slot(tmp_path, "oss://bucket//models", None) == one
    others = {
        repository.slot(tmp_path, "oss://bucket/models-old", None),
        repository.slot(tmp_path, "oss://bucket", None),
        repository.slot(tmp_path, "oss://other/models", None),
        repository.slot(tmp_path, "oss://bucket/models", "http://oss-cn-beijing.aliyuncs.com"),
    }
    assert len(others) == 4 and one not in others


def test_default_cache_is_the_setting_or_a_stable_temp_folder() -> None:
    assert repository.default_cache({repository.ENV_MODEL_CACHE: "/m"}) == Path("/m")
    assert repository.default_cache({}) == repository.default_cache({})
    assert repository.default_cache({}).name.startswith("openeas-models-")


def test_local_repository_is_used_in_place(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert repository.local_repository(str(tmp_path), cache, endpoint=None) == tmp_path
    assert repository.local_repository(f"file://{tmp_path}", cache, endpoint=None) == tmp_path
    assert not cache.exists()


def test_missing_local_repository_is_permanent(tmp_path: Path) -> None:
    with pytest.raises(repository.PullFailed, match="is not a directory") as caught:
        repository.local_repository(str(tmp_path / "nope"), tmp_path, endpoint=None)
    assert not caught.value.temporary


@pytest.mark.parametrize(
    ("error", "temporary"),
    [
        (storage.PermanentStorageError("bucket 'b' does not exist"), False),
        (storage.TemporaryStorageError("connection reset, gave up after 5 tries"), True),
    ],
)
def test_pull_errors_keep_their_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, temporary: bool
) -> None:
    def failing_pull(
        uri: str, dest: Path, *, endpoint: str | None, progress: object, node_cache: object
    ) -> None:
        raise error

    monkeypatch.setattr(pull_module, "pull", failing_pull)
    with pytest.raises(repository.PullFailed) as caught:
        repository.local_repository("oss://bucket/models", tmp_path, endpoint=None)
    assert caught.value.temporary is temporary
    assert caught.value.exit_code == (exits.PULL_TEMPORARY if temporary else exits.PULL_PERMANENT)
    assert str(caught.value) == str(error)


def test_remote_repository_is_pulled_into_its_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, Path, str | None]] = []

    def fake_pull(
        uri: str, dest: Path, *, endpoint: str | None, progress: object, node_cache: object
    ) -> None:
        calls.append((uri, dest, endpoint))

    monkeypatch.setattr(pull_module, "pull", fake_pull)
    cache = tmp_path / "cache"
    got = repository.local_repository("oss://bucket/m", cache, endpoint="http://127.0.0.1:9")
    assert got == repository.slot(cache, "oss://bucket/m", "http://127.0.0.1:9")
    assert calls == [("oss://bucket/m", got, "http://127.0.0.1:9")]
    assert cache.is_dir()


def test_a_local_repository_needs_no_pull_machinery() -> None:
    """A replica serving a local repository starts without the OSS client and its HTTP
    stack: the processor's start is on every cold start's path."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys; from pathlib import Path; from processors import repository; "
        f"repository.local_repository('{root / 'examples' / 'models'}', Path('.'), endpoint=None);"
        "print(sorted(m for m in sys.modules if m.startswith(('processors.storage.', 'urllib.r'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['processors.storage.errors', 'processors.storage.uri']"
