"""Model repository pull from the OSS stand-in: exact bytes, caching, parts, retries, resume,
atomic replacement, and the one-line reasons users get for what they must fix."""

from __future__ import annotations

import ctypes
import filecmp
import importlib
import json
import logging
import mmap
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import oss2
import pytest

from processors.storage import PermanentStorageError, TemporaryStorageError
from processors.storage import oss as oss_module
from processors.storage.buffers import page_aligned
from processors.storage.check import check
from processors.storage.crew import Crew, Task
from processors.storage.manifest import NAME as MANIFEST
from processors.storage.oss import RemoteObject
from processors.storage.plan import (
    LARGEST_PART,
    SMALLEST_PART,
    WHOLE_FILE,
    LocalStat,
    RemoteFile,
    fetched_whole,
    file_part_size,
    part_ranges,
    plan,
    remote_files,
)
from processors.storage.pull import PullReport, pull
from processors.storage.retry import Backoff
from processors.storage.uri import OssLocation
from testing.oss_server import Call, OssServer
from testing.waiting import wait_until
from tests.fixtures_oss import (
    ACCESS_KEY_SECRET,
    BUCKET,
    EXAMPLE_MODELS,
    STS_KEY_ID,
    STS_KEY_SECRET,
    STS_TOKEN,
    oss_bucket,
    upload_dir,
)

MiB = 1 << 20
pull_module = importlib.import_module("processors.storage.pull")  # `pull` is also the function


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pull_module, "BACKOFF", Backoff(attempts=3, first_delay=0.001))


@pytest.fixture
def prefix(oss_server: OssServer) -> str:
    """A fresh prefix holding a copy of the example models, so tests may change it."""
    name = f"t-{uuid.uuid4().hex[:8]}/models"
    upload_dir(oss_server, BUCKET, name, EXAMPLE_MODELS)
    return name


def same_tree(a: Path, b: Path) -> bool:
    """Same relative file paths with byte-identical content (manifest and caches aside)."""

    def files(root: Path) -> list[str]:
        return sorted(
            str(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file() and p.name != MANIFEST and "__pycache__" not in p.parts
        )

    names = files(a)
    return names == files(b) and all(filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def gets(server: OssServer) -> list[Call]:
    return [c for c in server.calls if c.method == "GET" and c.key]


def range_from(offset: int) -> Callable[[Call], bool]:
    """Matches the GETs of the part that starts at ``offset``."""
    return lambda call: (call.range or "").startswith(f"bytes={offset}-")


def put_random(server: OssServer, key: str, size: int) -> bytes:
    data = os.urandom(size)
    oss_bucket(server).put_object(key, data)
    return data


# -- the whole journey ---------------------------------------------------------------------------
def example_files() -> list[Path]:
    return [p for p in EXAMPLE_MODELS.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def test_pulls_the_example_models_byte_exact(
    oss_server: OssServer, oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    report = pull(oss_model_repo, tmp_path / "repo")

    assert same_tree(tmp_path / "repo", EXAMPLE_MODELS)
    files = example_files()
    sizes = sum(p.stat().st_size for p in files)
    assert (report.files, report.bytes_downloaded, report.bytes_reused) == (len(files), sizes, 0)
    assert report.dest == tmp_path / "repo"
    assert sorted(c.key for c in gets(oss_server)) == sorted(
        f"models/{p.relative_to(EXAMPLE_MODELS).as_posix()}" for p in files
    )
    # Beside the repository only the pull's state folder, and no staging tree left in it.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".repo.openeas", "repo"]
    assert not list((tmp_path / ".repo.openeas").glob("tree-*"))


def test_second_pull_of_an_unchanged_repository_downloads_nothing(
    oss_server: OssServer, oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    first = pull(oss_model_repo, tmp_path / "repo")
    oss_server.reset()

    second = pull(oss_model_repo, tmp_path / "repo")

    assert oss_server.bytes_served() == 0
    assert [c.method for c in oss_server.calls] == ["GET"]  # the listing only
    assert (second.bytes_downloaded, second.bytes_reused) == (0, first.bytes_downloaded)
    assert same_tree(tmp_path / "repo", EXAMPLE_MODELS)


def test_only_changed_files_are_fetched_and_removed_ones_go(
    oss_server: OssServer, prefix: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    uri = f"oss://{BUCKET}/{prefix}"
    pull(uri, tmp_path / "repo")
    client = oss_bucket(oss_server)
    client.put_object(f"{prefix}/add_sub/config.pbtxt", b'name: "add_sub"\n# changed\n')
    client.delete_object(f"{prefix}/inception_graphdef/inception_labels.txt")
    client.put_object(f"{prefix}/new_model/config.pbtxt", b'name: "new_model"\n')
    oss_server.reset()

    report = pull(uri, tmp_path / "repo")

    assert sorted(c.key for c in gets(oss_server)) == [
        f"{prefix}/add_sub/config.pbtxt",
        f"{prefix}/new_model/config.pbtxt",
    ]
    repo = tmp_path / "repo"
    assert (repo / "add_sub/config.pbtxt").read_bytes() == b'name: "add_sub"\n# changed\n'
    assert (repo / "new_model/config.pbtxt").exists()
    assert not (repo / "inception_graphdef/inception_labels.txt").exists()
    assert report.files == len(example_files())  # one removed, one added
    assert (repo / "add_sub/1/model.py").read_bytes() == (
        EXAMPLE_MODELS / "add_sub/1/model.py"
    ).read_bytes()


def test_a_locally_edited_file_is_fetched_again(
    oss_server: OssServer, prefix: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    uri = f"oss://{BUCKET}/{prefix}"
    pull(uri, tmp_path / "repo")
    (tmp_path / "repo/add_sub/config.pbtxt").write_text("edited by hand\n")
    oss_server.reset()

    pull(uri, tmp_path / "repo")

    assert [c.key for c in gets(oss_server)] == [f"{prefix}/add_sub/config.pbtxt"]
    assert same_tree(tmp_path / "repo", EXAMPLE_MODELS)


def pull_big(
    oss_server: OssServer,
    size: int,
    dest: Path,
    faults: Callable[[str], None] = lambda key: None,
    **kw: Any,
) -> tuple[bytes, str, PullReport]:
    """Pull a repository of one ``size``-byte file into ``dest``, counting from zero (the
    stand-in's ``faults`` for its key set then): its bytes, its key and the pull's report
    (after checking the copy is exact)."""
    key = f"big-{uuid.uuid4().hex[:6]}/m/1/model.bin"
    data = put_random(oss_server, key, size)
    oss_server.reset()
    faults(key)
    report = pull(f"oss://{BUCKET}/{key.rsplit('/', 3)[0]}", dest, **kw)
    assert (dest / "m/1/model.bin").read_bytes() == data
    return data, key, report


def streams(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Have the pull run ``n`` ranged streams (up to its workers), whatever its first
    stream's reads measure (a loaded test machine's are no guide)."""
    monkeypatch.setattr(pull_module, "stream_count", lambda ratios, limit: min(n, limit))


def threads_started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What the pull starts on threads of their own, counted as started (its first task
    runs on the caller's thread)."""
    started: list[int] = []
    start = Crew.start

    def spy(crew: Crew, task: Task, count: int = 1) -> None:
        started.append(count)
        start(crew, task, count)

    monkeypatch.setattr(Crew, "start", spy)
    return started


def starts(server: OssServer) -> list[int]:
    """Where the ranged GETs began, in order."""
    return [int((c.range or "bytes=0-").split("=")[1].split("-")[0]) for c in gets(server)]


def test_one_stream_reads_a_big_file_in_one_get_part_by_part(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream alone (its reads kept its CPU busy) goes on from part to part in one GET,
    on the caller's thread: the pull starts none."""
    streams(monkeypatch, 1)
    started = threads_started(monkeypatch)
    data, key, report = pull_big(oss_server, 5 * MiB + 123, tmp_path / "r", part_size=MiB)
    assert [(c.range, c.status) for c in gets(oss_server)] == [(f"bytes=0-{len(data) - 1}", 206)]
    assert report.bytes_downloaded == len(data) == oss_server.bytes_served(key)
    assert started == []


def address(buffer: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def test_a_stream_reads_into_a_page_aligned_buffer(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read of a part lands at a page boundary: the kernel's copies into and out of
    a buffer 16 bytes past a cache line, where a big bytearray starts, take 1.5x as long."""
    streams(monkeypatch, 2)
    starts: list[int] = []
    readinto = oss_module.ObjectBody.readinto

    def spy(body: oss_module.ObjectBody, buffer: memoryview) -> int:
        starts.append(address(buffer))
        return readinto(body, buffer)

    monkeypatch.setattr(oss_module.ObjectBody, "readinto", spy)
    pull_big(oss_server, 3 * MiB + 5, tmp_path / "r", part_size=MiB, workers=2)
    assert len(starts) >= 4  # a read per MiB at least
    assert [a % mmap.PAGESIZE for a in starts] == [0] * len(starts)


@pytest.mark.parametrize("size", [1, 4096, MiB + 3])
def test_a_page_aligned_buffer_starts_on_a_page_and_holds_its_size(size: int) -> None:
    buffer = page_aligned(size)
    buffer[-1:] = b"x"
    assert (len(buffer), address(buffer) % mmap.PAGESIZE, bytes(buffer[-1:])) == (size, 0, b"x")


def test_a_stream_that_waits_on_the_network_gets_company(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    """The first stream's reads wait (a slow link): more streams start, each at a part of
    the run left, and the first stops where the next one began."""
    key = f"slow-{uuid.uuid4().hex[:6]}/m/1/model.bin"
    data = put_random(oss_server, key, 2 * MiB)
    oss_server.reset()
    oss_server.slow_next(1, rate=2e6)
    part = MiB // 4

    report = pull(
        f"oss://{BUCKET}/{key.rsplit('/', 3)[0]}", tmp_path / "r", part_size=part, workers=4
    )

    assert (tmp_path / "r/m/1/model.bin").read_bytes() == data
    begun = starts(oss_server)
    assert begun[0] == 0 and len(begun) > 1
    assert all(b % part == 0 for b in begun) and len(set(begun)) == len(begun)
    assert report.bytes_downloaded == len(data)


def test_a_listing_longer_than_one_page_is_pulled_whole(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pull follows ListObjectsV2 continuation tokens (pages of 10 here, to stay fast;
    OSS's real limit of 1000 is what LIST_PAGE_SIZE asks for)."""
    assert oss_module.LIST_PAGE_SIZE == 1000
    monkeypatch.setattr(oss_module, "LIST_PAGE_SIZE", 10)
    base = f"many-{uuid.uuid4().hex[:6]}"
    count = 25  # three pages
    for i in range(count):
        oss_server.put(BUCKET, f"{base}/m/1/f{i:04d}", b"%d" % i)
    oss_server.reset()

    report = pull(f"oss://{BUCKET}/{base}", tmp_path / "r")

    assert report.files == count
    listings = [c for c in oss_server.calls if c.method == "GET" and not c.key]
    assert len(listings) == 3
    assert sorted(p.name for p in (tmp_path / "r/m/1").iterdir()) == [
        f"f{i:04d}" for i in range(count)
    ]
    assert (tmp_path / f"r/m/1/f{count - 1:04d}").read_bytes() == b"%d" % (count - 1)


def test_multipart_objects_are_verified_by_crc64(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    """A multipart upload's ETag is not the content's MD5: the pull checks CRC64 instead,
    and still catches a corrupted part."""
    key = f"mp-{uuid.uuid4().hex[:6]}/m/1/model.bin"
    data = os.urandom(3 * MiB + 7)
    etag = oss_server.put(BUCKET, key, data, parts=3)
    assert etag.endswith("-3")
    uri = f"oss://{BUCKET}/{key.rsplit('/', 3)[0]}"
    oss_server.reset()
    oss_server.corrupt_next(1, match=lambda c: c.key == key)
    with pytest.raises(TemporaryStorageError, match=r"CRC64 .* differs from OSS's"):
        pull(uri, tmp_path / "r", part_size=MiB)

    report = pull(uri, tmp_path / "r", part_size=MiB)
    assert (tmp_path / "r/m/1/model.bin").read_bytes() == data
    assert report.files == 1
    manifest = (tmp_path / "r" / MANIFEST).read_text()
    assert etag in manifest  # the multipart ETag is what a later pull compares


def test_an_object_replaced_mid_pull_fails_the_pull_then_comes_whole(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    """Parts are read with If-Match on the listed ETag: when another writer replaces the
    object between two GETs (here: the first broke), OSS answers 412, the pull fails as
    temporary (never mixing two versions), and the next pull gets the new object whole."""
    key = f"rep-{uuid.uuid4().hex[:6]}/m/1/model.bin"
    old, new = os.urandom(3 * MiB), os.urandom(3 * MiB)
    oss_server.put(BUCKET, key, old)
    uri = f"oss://{BUCKET}/{key.rsplit('/', 3)[0]}"
    oss_server.reset()
    oss_server.drop_next(1, after=MiB + 10)
    oss_server.before_next(
        lambda: oss_server.put(BUCKET, key, new),
        match=lambda c: c.range == f"bytes={MiB + 10}-{3 * MiB - 1}",
    )

    with pytest.raises(
        TemporaryStorageError, match=r"changed during the pull \(PreconditionFailed"
    ):
        pull(uri, tmp_path / "r", part_size=MiB, workers=1)
    assert 412 in [c.status for c in gets(oss_server)]
    assert not (tmp_path / "r").exists()

    pull(uri, tmp_path / "r", part_size=MiB)
    assert (tmp_path / "r/m/1/model.bin").read_bytes() == new


def test_zero_byte_files_and_directory_markers(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    base = f"z-{uuid.uuid4().hex[:6]}"
    client = oss_bucket(oss_server)
    client.put_object(f"{base}/", b"")  # "folders" made in the console
    client.put_object(f"{base}/m/", b"")
    client.put_object(f"{base}/m/empty.txt", b"")

    report = pull(f"oss://{BUCKET}/{base}", tmp_path / "r")

    assert report.files == 1
    assert (tmp_path / "r/m/empty.txt").read_bytes() == b""


def test_small_files_come_whole_beside_the_parts_of_big_ones(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    """A small file is one GET of all its bytes, written straight into the tree (no part
    file, no resume state); a big one in the same pull comes in ranged parts."""
    base = f"mix-{uuid.uuid4().hex[:6]}"
    small = {f"m/{i}/config.pbtxt": os.urandom(100 + i) for i in range(5)}
    small["m/empty"] = b""
    for path, data in small.items():
        oss_server.put(BUCKET, f"{base}/{path}", data)
    big = put_random(oss_server, f"{base}/m/1/model.bin", 3 * MiB)
    oss_server.reset()
    seen_partials: list[str] = []
    oss_server.before_next(
        lambda: seen_partials.extend(p.name for p in (tmp_path / ".r.openeas/partial").iterdir()),
        n=100,
        match=lambda c: "config" in c.key,
    )

    report = pull(f"oss://{BUCKET}/{base}", tmp_path / "r", part_size=MiB, workers=2)

    for path, data in small.items():
        assert (tmp_path / "r" / path).read_bytes() == data
    assert (tmp_path / "r/m/1/model.bin").read_bytes() == big
    ranges = {c.key.removeprefix(f"{base}/"): c.range for c in gets(oss_server)}
    assert len([c for c in gets(oss_server) if "config" in c.key]) == 5  # none for the empty
    assert all(ranges[p] == f"bytes=0-{len(d) - 1}" for p, d in small.items() if d)
    assert len({name.split(".")[0] for name in seen_partials}) == 1  # the big file's only
    assert report.bytes_downloaded == sum(map(len, small.values())) + len(big)
    oss_server.reset()
    assert pull(f"oss://{BUCKET}/{base}", tmp_path / "r").bytes_downloaded == 0
    assert gets(oss_server) == []  # the manifest's mtimes are the files' own


def test_a_small_file_replaced_after_the_listing_is_refused_then_comes_new(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    """A small file's GET carries the listed ETag too: never the new bytes under the old
    ETag (which would make the next pull keep them as they are)."""
    key = f"swap-{uuid.uuid4().hex[:6]}/m/config.pbtxt"
    oss_server.put(BUCKET, key, b"old")
    uri = f"oss://{BUCKET}/{key.rsplit('/', 2)[0]}"
    oss_server.before_next(
        lambda: oss_server.put(BUCKET, key, b"new!"), match=lambda c: c.key == key
    )

    with pytest.raises(
        TemporaryStorageError, match=r"changed during the pull \(PreconditionFailed"
    ):
        pull(uri, tmp_path / "r")

    pull(uri, tmp_path / "r")
    assert (tmp_path / "r/m/config.pbtxt").read_bytes() == b"new!"
    oss_server.put(BUCKET, key, b"newer")
    oss_server.reset()
    pull(uri, tmp_path / "r")
    assert (tmp_path / "r/m/config.pbtxt").read_bytes() == b"newer"
    assert [c.key for c in gets(oss_server)] == [key]


def test_bucket_root_and_v4_sts_credentials(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root_bucket = f"root-{uuid.uuid4().hex[:6]}"
    oss_server.create_bucket(root_bucket)
    oss_bucket(oss_server, root_bucket).put_object("m/config.pbtxt", b"x")
    monkeypatch.setenv("OSS_ACCESS_KEY_ID", STS_KEY_ID)
    monkeypatch.setenv("OSS_ACCESS_KEY_SECRET", STS_KEY_SECRET)
    monkeypatch.setenv("OSS_SESSION_TOKEN", STS_TOKEN)
    monkeypatch.setenv("OSS_REGION", oss_server.region)

    pull(f"oss://{root_bucket}", tmp_path / "r")

    assert (tmp_path / "r/m/config.pbtxt").read_bytes() == b"x"


def test_endpoint_argument_overrides_the_environment(
    oss_model_repo: str,
    oss_server: OssServer,
    oss_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OSS_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    pull(oss_model_repo, tmp_path / "r", endpoint=oss_server.endpoint)
    assert same_tree(tmp_path / "r", EXAMPLE_MODELS)


def test_proxy_variables_are_honoured_once_per_bucket(
    oss_model_repo: str,
    oss_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The proxy for the endpoint is resolved as ``requests`` would, once, not per file:
    NO_PROXY exempts the stand-in (the pull works), and without it the proxy is used."""
    proxy = "http://proxy.invalid:3128"
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    location = OssLocation(BUCKET, "")
    exempt = oss_module.OssBucket(location)._bucket.session.session
    assert (exempt.proxies, exempt.trust_env) == ({}, False)
    pull(oss_model_repo, tmp_path / "r")
    assert same_tree(tmp_path / "r", EXAMPLE_MODELS)
    monkeypatch.delenv("NO_PROXY")
    proxied = oss_module.OssBucket(location)._bucket.session.session
    assert proxied.proxies["http"] == proxy
    with pytest.raises(TemporaryStorageError, match=r"\(ProxyError\)"):
        pull(oss_model_repo, tmp_path / "via-proxy")  # through proxy.invalid: unreachable


def test_local_uris_are_copied(tmp_path: Path) -> None:
    report = pull(f"file://{EXAMPLE_MODELS}", tmp_path / "r")
    assert same_tree(tmp_path / "r", EXAMPLE_MODELS)
    assert report.files >= 5
    with pytest.raises(PermanentStorageError, match="is not a directory"):
        pull(str(tmp_path / "missing"), tmp_path / "r2")


# -- temporary trouble ---------------------------------------------------------------------------
def test_5xx_and_dropped_connections_are_retried(
    oss_server: OssServer, oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    oss_server.fail_next(2, status=503)  # the listing, twice
    oss_server.fail_next(1, status=500, match=lambda c: c.key.endswith("model.py"))
    oss_server.drop_next(1, after=100, match=lambda c: c.key.endswith("labels.txt"))

    pull(oss_model_repo, tmp_path / "repo")

    assert same_tree(tmp_path / "repo", EXAMPLE_MODELS)
    statuses = [c.status for c in oss_server.calls]
    assert statuses.count(503) == 2 and statuses.count(500) == 1
    labels = [c for c in oss_server.calls if c.key.endswith("labels.txt")]
    assert [c.sent for c in labels] == [100, 11011]


def test_a_dropped_connection_resumes_inside_the_part(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    base = f"drop-{uuid.uuid4().hex[:6]}"
    key = f"{base}/m/model.bin"
    data = put_random(oss_server, key, 4 * MiB)
    oss_server.drop_next(1, after=2 * MiB + MiB // 2)

    pull(f"oss://{BUCKET}/{base}", tmp_path / "r")

    assert (tmp_path / "r/m/model.bin").read_bytes() == data
    first, second = gets(oss_server)
    # The retry starts at the first byte that did not arrive, not at byte 0.
    assert (first.range, second.range) == (
        f"bytes=0-{4 * MiB - 1}",
        f"bytes={2 * MiB + MiB // 2}-{4 * MiB - 1}",
    )


def test_persistent_5xx_is_a_temporary_error_after_bounded_retries(
    oss_server: OssServer, oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    oss_server.fail_next(100, status=500)
    with pytest.raises(TemporaryStorageError, match=r"500 InternalError.*gave up after 3"):
        pull(oss_model_repo, tmp_path / "repo")
    assert len(oss_server.calls) == 3
    assert not (tmp_path / "repo").exists()


def test_unreachable_endpoint_is_temporary(
    oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(TemporaryStorageError, match=r"cannot reach OSS at http://127\.0\.0\.1:9"):
        pull(oss_model_repo, tmp_path / "r", endpoint="http://127.0.0.1:9")


def test_corruption_is_caught_by_crc64_then_md5(
    oss_server: OssServer, prefix: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    uri = f"oss://{BUCKET}/{prefix}"
    oss_server.corrupt_next(1, match=lambda c: c.key.endswith("add_sub/1/model.py"))
    with pytest.raises(TemporaryStorageError, match=r"CRC64 .* differs from OSS's"):
        pull(uri, tmp_path / "repo")

    oss_server.crc_headers = False  # older objects / proxies: only the ETag (MD5) is left
    oss_server.corrupt_next(1, match=lambda c: c.key.endswith("add_sub/1/model.py"))
    with pytest.raises(TemporaryStorageError, match=r"MD5 .* differs from the ETag"):
        pull(uri, tmp_path / "repo")

    pull(uri, tmp_path / "repo")
    assert same_tree(tmp_path / "repo", EXAMPLE_MODELS)


def test_an_interrupted_download_resumes_with_the_missing_parts(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    base = f"resume-{uuid.uuid4().hex[:6]}"
    key = f"{base}/m/1/model.bin"
    data = put_random(oss_server, key, 6 * MiB)
    oss_server.drop_next(1, after=3 * MiB + 1000)  # the one stream, in part 3
    oss_server.drop_next(100)  # its retries

    with pytest.raises(TemporaryStorageError, match="gave up after 3"):
        pull(f"oss://{BUCKET}/{base}", tmp_path / "r", part_size=MiB, workers=1)
    assert not (tmp_path / "r").exists()

    oss_server.reset()
    report = pull(f"oss://{BUCKET}/{base}", tmp_path / "r", part_size=MiB, workers=1)

    assert (tmp_path / "r/m/1/model.bin").read_bytes() == data
    assert oss_server.bytes_served(key) == 3 * MiB == report.bytes_downloaded
    assert report.bytes_reused == 3 * MiB
    assert not (tmp_path / ".r.openeas/partial").exists()  # cleaned once in place


def test_a_pull_split_among_streams_resumes_with_the_parts_none_finished(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams took parts as they went; the second one keeps breaking: the next pull (one
    stream, this time) fetches only the parts no stream finished, once each."""
    base = f"split-{uuid.uuid4().hex[:6]}"
    key = f"{base}/m/1/model.bin"
    data = put_random(oss_server, key, 8 * MiB)
    uri = f"oss://{BUCKET}/{base}"
    streams(monkeypatch, 2)
    # The first stream paced (~1 s for the file), so a second surely starts beside it.
    oss_server.slow_next(1, rate=8e6, match=lambda c: c.key == key and not starts_after_0(c))
    oss_server.drop_next(100, match=lambda c: c.key == key and starts_after_0(c))
    with pytest.raises(TemporaryStorageError, match="gave up after"):
        pull(uri, tmp_path / "r", part_size=MiB, workers=2)
    assert len(gets(oss_server)) >= 1 + 3  # the first stream's; a later one's, its retries

    oss_server.reset()
    streams(monkeypatch, 1)
    report = pull(uri, tmp_path / "r", part_size=MiB, workers=2)

    assert (tmp_path / "r/m/1/model.bin").read_bytes() == data
    assert report.bytes_reused % MiB == 0 and 0 < report.bytes_reused < len(data)
    assert report.bytes_downloaded == len(data) - report.bytes_reused == oss_server.bytes_served()


def starts_after_0(call: Call) -> bool:
    return not (call.range or "").startswith("bytes=0-")


def test_resume_distrusts_parts_whose_bytes_changed_on_disk(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    base = f"distrust-{uuid.uuid4().hex[:6]}"
    key = f"{base}/m/model.bin"
    data = put_random(oss_server, key, 4 * MiB)
    oss_server.drop_next(1, after=3 * MiB + 1000)  # the one stream, in part 3
    oss_server.drop_next(100)  # its retries
    with pytest.raises(TemporaryStorageError):
        pull(f"oss://{BUCKET}/{base}", tmp_path / "r", part_size=MiB, workers=1)
    (partial,) = (tmp_path / ".r.openeas/partial").glob("*.data")
    with partial.open("r+b") as f:  # bit rot (or a crash before the page cache was flushed)
        f.write(b"\0" * 10)
    oss_server.reset()

    pull(f"oss://{BUCKET}/{base}", tmp_path / "r", part_size=MiB, workers=1)

    assert (tmp_path / "r/m/model.bin").read_bytes() == data
    assert oss_server.bytes_served(key) == 2 * MiB  # part 0 again, and part 3


def test_a_state_line_torn_by_a_crash_costs_only_its_part(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = f"torn-{uuid.uuid4().hex[:6]}"
    key = f"{base}/m/model.bin"
    data = put_random(oss_server, key, 4 * MiB)
    streams(monkeypatch, 1)
    oss_server.drop_next(1, after=3 * MiB + 1000)  # parts 0-2 are in
    oss_server.drop_next(100)
    with pytest.raises(TemporaryStorageError):
        pull(f"oss://{BUCKET}/{base}", tmp_path / "r", part_size=MiB, workers=1)
    (state,) = (tmp_path / ".r.openeas/partial").glob("*.parts")
    lines = state.read_bytes().splitlines(keepends=True)
    assert len(lines) == 1 + 3  # the layout, then a line per part
    state.write_bytes(b"".join(lines)[:-5])  # the crash came in the middle of part 2's
    oss_server.reset()

    report = pull(f"oss://{BUCKET}/{base}", tmp_path / "r", part_size=MiB, workers=1)

    assert (tmp_path / "r/m/model.bin").read_bytes() == data
    assert oss_server.bytes_served(key) == 2 * MiB == report.bytes_downloaded  # parts 2 and 3


def test_a_failed_pull_leaves_the_previous_copy_intact(
    oss_server: OssServer, prefix: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    uri = f"oss://{BUCKET}/{prefix}"
    pull(uri, tmp_path / "repo")
    manifest = (tmp_path / "repo" / MANIFEST).read_text()
    client = oss_bucket(oss_server)
    client.put_object(f"{prefix}/add_sub/config.pbtxt", b"v2")
    client.put_object(f"{prefix}/inception_graphdef/config.pbtxt", b"v2")
    oss_server.fail_next(100, match=lambda c: c.key.endswith("inception_graphdef/config.pbtxt"))

    with pytest.raises(TemporaryStorageError):
        pull(uri, tmp_path / "repo")

    assert same_tree(tmp_path / "repo", EXAMPLE_MODELS)  # old copy, untouched, complete
    assert (tmp_path / "repo" / MANIFEST).read_text() == manifest
    assert not list((tmp_path / ".repo.openeas").glob("tree-*"))
    oss_server.reset()
    pull(uri, tmp_path / "repo")
    assert (tmp_path / "repo/inception_graphdef/config.pbtxt").read_bytes() == b"v2"


# -- what the user must fix ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "uri", "reason"),
    [
        (
            {"OSS_ACCESS_KEY_SECRET": "wrong"},
            "oss://triton-model-repo/models",
            "OSS rejected the signature: OSS_ACCESS_KEY_SECRET is not the secret of "
            "OSS_ACCESS_KEY_ID",
        ),
        (
            {"OSS_ACCESS_KEY_ID": "LTAI-unknown"},
            "oss://triton-model-repo/models",
            "OSS does not know OSS_ACCESS_KEY_ID",
        ),
        (
            {
                "OSS_ACCESS_KEY_ID": STS_KEY_ID,
                "OSS_ACCESS_KEY_SECRET": STS_KEY_SECRET,
                "OSS_SESSION_TOKEN": "expired-token",
            },
            "oss://triton-model-repo/models",
            "OSS rejected OSS_SESSION_TOKEN: fetch a fresh STS token",
        ),
        ({}, "oss://no-such-bucket/models", "oss://no-such-bucket/models/: bucket does not exist"),
        ({}, "oss://triton-model-repo/nothing-here", "is empty: upload the model repository"),
        (
            {"OSS_ACCESS_KEY_ID": ""},
            "oss://triton-model-repo/models",
            "OSS_ACCESS_KEY_ID is not set",
        ),
        (
            {"OSS_ACCESS_KEY_SECRET": ""},
            "oss://triton-model-repo/m",
            "OSS_ACCESS_KEY_SECRET is not set",
        ),
        ({"OSS_ENDPOINT": ""}, "oss://triton-model-repo/models", "OSS_ENDPOINT is not set"),
    ],
)
def test_permanent_errors_say_what_to_fix(
    oss_server: OssServer,
    oss_model_repo: str,
    oss_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    uri: str,
    reason: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(PermanentStorageError) as caught:
        pull(uri, tmp_path / "repo")

    message = str(caught.value)
    assert reason in message and "\n" not in message
    assert len(oss_server.calls) <= 1  # permanent means: not retried
    for secret in (ACCESS_KEY_SECRET, STS_KEY_SECRET, "expired-token"):
        assert secret not in message
    cause = caught.value.__cause__
    if isinstance(cause, oss2.exceptions.OssError):  # chained, but scrubbed of signed material
        assert "StringToSign" not in str(cause) and "expired-token" not in str(cause)


def test_access_denied_by_bucket_acl(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    private = f"private-{uuid.uuid4().hex[:6]}"
    oss_server.create_bucket(private)
    oss_bucket(oss_server, private).put_object("models/a", b"a")
    oss_server.set_grants(private, {"someone-else": "read"})
    with pytest.raises(PermanentStorageError, match="access denied: let this AccessKey list"):
        pull(f"oss://{private}/models", tmp_path / "r")


def test_refuses_to_replace_a_directory_it_did_not_make(
    oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home/notes.txt").write_text("mine")
    with pytest.raises(PermanentStorageError, match="not empty and was not made by a pull"):
        pull(oss_model_repo, tmp_path / "home")
    assert (tmp_path / "home/notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    pull(oss_model_repo, tmp_path / "empty")  # an empty mount point is fine


def test_never_logs_credentials(
    oss_server: OssServer,
    oss_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    oss_model_repo: str,
) -> None:
    monkeypatch.setenv("OSS_ACCESS_KEY_ID", STS_KEY_ID)
    monkeypatch.setenv("OSS_ACCESS_KEY_SECRET", STS_KEY_SECRET)
    monkeypatch.setenv("OSS_SESSION_TOKEN", STS_TOKEN)
    oss_server.fail_next(1)
    with caplog.at_level(logging.DEBUG):
        pull(oss_model_repo, tmp_path / "r")
        monkeypatch.setenv("OSS_ACCESS_KEY_SECRET", "wrong")
        with pytest.raises(PermanentStorageError):
            pull(oss_model_repo, tmp_path / "r2")
    assert "models/add_sub/config.pbtxt" in caplog.text or "oss://" in caplog.text
    for secret in (STS_KEY_SECRET, STS_TOKEN, "wrong", "Signature"):
        assert secret not in caplog.text


# -- planning, table-style -----------------------------------------------------------------------
LOC = OssLocation("b", "models/")


@pytest.mark.parametrize(
    ("keys", "reason"),
    [
        ([], "oss://b/models/ is empty"),
        (["models/"], "oss://b/models/ is empty"),
        (["models/a/../../etc/passwd"], "cannot be a file of the repository"),
        (["models/a//b"], "cannot be a file of the repository"),
        (["models/.openeas-manifest.json"], "cannot be a file of the repository"),
        (["models/m/config", "models/m/config/x"], "m/config is both a file and a directory"),
        (["models/m/1/x/y", "models/m"], "m is both a file and a directory"),
    ],
)
def test_remote_files_refuse_unplaceable_keys(keys: list[str], reason: str) -> None:
    with pytest.raises(PermanentStorageError, match=reason):
        remote_files(LOC, [RemoteObject(k, 1, "E") for k in keys])


def test_remote_files_map_keys_to_paths() -> None:
    objects = [
        RemoteObject(k, 1, "E") for k in ("models/", "models/m/", "models/m/1/a", "models/b")
    ]
    assert [f.path for f in remote_files(LOC, objects)] == ["b", "m/1/a"]
    root = remote_files(OssLocation("b", ""), [RemoteObject("x/y", 1, "E")])
    assert root == [RemoteFile("x/y", "x/y", 1, "E")]


@pytest.mark.parametrize(
    ("etag", "local", "reused"),
    [
        ("E1", LocalStat(3, 7), True),
        ("E2", LocalStat(3, 7), False),  # object changed
        ("E1", LocalStat(3, 8), False),  # copy touched
        ("E1", None, False),  # copy gone
    ],
)
def test_plan_reuses_only_unchanged_untouched_files(
    etag: str, local: LocalStat | None, reused: bool
) -> None:
    from processors.storage.manifest import Entry

    f = RemoteFile("a", "models/a", 3, etag)
    previous = {"a": Entry("models/a", "E1", 3, 1, 7)}
    result = plan([f], previous, {"a": local} if local else {})
    assert (result.reuse == [f]) is reused and (result.fetch == [f]) is not reused


def test_part_ranges() -> None:
    assert part_ranges(0, 4) == []
    assert part_ranges(4, 4) == [(0, 3)]
    assert part_ranges(9, 4) == [(0, 3), (4, 7), (8, 8)]


@pytest.mark.parametrize(
    ("size", "workers", "part"),
    [
        (5 * MiB, 8, SMALLEST_PART),  # small: the smallest part
        (200 * MiB, 8, 25 * MiB),  # one part per worker: 8 requests, not 25
        (201 * MiB + 1, 8, 25 * MiB + 128 * 1024 + 1),  # rounded up: still 8
        (10_000 * MiB, 8, LARGEST_PART),  # bounded: what a crash may fetch again
        (100 * MiB, 1, LARGEST_PART),
        (0, 8, SMALLEST_PART),
    ],
)
def test_a_files_part_size_is_its_share_of_the_workers(size: int, workers: int, part: int) -> None:
    assert file_part_size(size, workers) == part
    assert len(part_ranges(size, part)) <= max(workers, -(-size // LARGEST_PART))


@pytest.mark.parametrize(
    ("size", "part", "whole"),
    [
        (0, SMALLEST_PART, True),
        (200, SMALLEST_PART, True),
        (WHOLE_FILE, SMALLEST_PART, True),
        (WHOLE_FILE + 1, SMALLEST_PART, False),  # streamed, in one part
        (200, 100, False),  # a part size given smaller than the file: parts, as asked
        (200, 200, True),
    ],
)
def test_which_files_are_fetched_whole(size: int, part: int, whole: bool) -> None:
    assert fetched_whole(size, part) is whole


MD5_OF_ABC = "900150983cd24fb0d6963f7d28e17f72"


@pytest.mark.parametrize(
    ("crc", "object_crc", "etag", "error"),
    [
        (7, 7, MD5_OF_ABC, None),
        (7, 8, MD5_OF_ABC, r"CRC64 7 differs from OSS's 8: corrupted in transit"),
        (7, None, MD5_OF_ABC, None),  # no CRC from OSS: the MD5 of a simple upload's ETag
        (7, None, MD5_OF_ABC.upper(), None),
        (7, None, "0" * 32, r"MD5 900150983cd24fb0d6963f7d28e17f72 differs from the ETag 0+"),
        (7, None, "ABC-3", None),  # multipart ETag, no CRC: only the size is known
    ],
)
def test_content_checks(crc: int, object_crc: int | None, etag: str, error: str | None) -> None:
    file = RemoteFile("a", "models/a", 3, etag)
    md5 = lambda: MD5_OF_ABC  # noqa: E731
    if error is None:
        check(file, crc, object_crc, md5)
    else:
        with pytest.raises(TemporaryStorageError, match=rf"models/a \(3 bytes\): {error}"):
            check(file, crc, object_crc, md5)


def test_a_big_file_is_split_among_the_workers(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a part size, a big file's parts are its share of the workers."""
    streams(monkeypatch, 2)
    started = threads_started(monkeypatch)

    def paced(key: str) -> None:  # the first stream (~1 s a half): the second surely starts
        oss_server.slow_next(1, rate=8e6, match=lambda c: c.key == key)

    pull_big(oss_server, 2 * SMALLEST_PART + 123, tmp_path / "r", paced, workers=2)
    # Two halves, not three parts of the smallest size; the second stream starts at the
    # second half long before the first one's reads get there, on the one thread started.
    assert starts(oss_server) == [0, SMALLEST_PART + 62]
    assert started == [1]


def test_manifest_records_what_was_pulled(
    oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    pull(oss_model_repo, tmp_path / "r")
    manifest = json.loads((tmp_path / "r" / MANIFEST).read_text())
    entry = manifest["files"]["add_sub/config.pbtxt"]
    assert manifest["source"] == "oss://triton-model-repo/models/"
    assert entry["key"] == "models/add_sub/config.pbtxt" and isinstance(entry["crc"], int)


def test_readers_always_see_a_whole_repository(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    base = f"swap-{uuid.uuid4().hex[:6]}"
    client = oss_bucket(oss_server)
    dest = tmp_path / "repo"
    seen: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                seen.append((dest / "m/version").read_text())
            except FileNotFoundError:
                seen.append("missing")

    def sees(version: str) -> Callable[[], bool]:
        return lambda: seen[-1] == version

    client.put_object(f"{base}/m/version", b"0")
    pull(f"oss://{BUCKET}/{base}", dest)
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for version in range(1, 11):
            client.put_object(f"{base}/m/version", str(version).encode())
            pull(f"oss://{BUCKET}/{base}", dest)
            wait_until(sees(str(version)), 10, what=f"a reader sees {version}")
    finally:
        done.set()
        thread.join()
    # Every version was read (so reads spanned every swap), and never a partial one.
    assert set(seen) == {str(v) for v in range(11)}, sorted(set(seen))
    assert (dest / "m/version").read_text() == "10"


def test_concurrent_pulls_into_one_destination_take_turns(
    oss_server: OssServer, oss_model_repo: str, oss_env: dict[str, str], tmp_path: Path
) -> None:
    with ThreadPoolExecutor(3) as pool:
        reports = list(pool.map(lambda _: pull(oss_model_repo, tmp_path / "repo"), range(3)))
    assert same_tree(tmp_path / "repo", EXAMPLE_MODELS)
    assert sorted(r.bytes_downloaded == 0 for r in reports) == [False, True, True]
