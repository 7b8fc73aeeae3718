"""The node-local model cache: a second pull on the node (a scale-up) downloads nothing from
OSS (counted at the OSS stand-in), a changed ETag is a miss, a corrupted cached copy is
noticed and fetched again (and the cache repaired), the size bound holds (the LRU choice as a
table) and old objects are swept; the local runtime's shared model cache likewise pulls once.
The cache server runs for real on a loopback port; the pulls use unmodified oss2."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from processors import repository
from processors.model_cache.lru import Cached, to_evict
from processors.model_cache.server import CacheServer
from processors.model_cache.store import Refused, Store, address
from processors.model_cache.wire import CRC_HEADER, TOKEN_ENV
from processors.storage.crc64 import Crc64
from processors.storage.node_cache import ENV_URL, NodeCache
from processors.storage.pull import pull
from testing.oss_server import OssServer
from tests.fixtures_oss import BUCKET

DAY = 86400.0


@pytest.mark.parametrize(
    ("objects", "max_bytes", "incoming", "evicted"),
    [
        ([], 10, 5, []),
        ([("a", 4, 1.0), ("b", 4, 2.0)], 10, 0, []),
        ([("a", 4, 1.0), ("b", 4, 2.0)], 10, 2, []),  # exactly full
        ([("a", 4, 1.0), ("b", 4, 2.0)], 10, 3, ["a"]),  # least recently used first
        ([("b", 4, 2.0), ("a", 4, 1.0)], 10, 3, ["a"]),  # whatever the listing order
        ([("a", 4, 1.0), ("b", 4, 2.0), ("c", 1, 3.0)], 5, 4, ["a", "b"]),
        ([("a", 4, 1.0), ("b", 4, 2.0)], 5, 5, ["a", "b"]),  # all go for a big one
        ([("a", 9, 5.0), ("b", 1, 1.0)], 10, 1, ["b"]),  # small but old goes first
        ([("a", 9, 5.0), ("b", 1, 1.0)], 10, 2, ["b", "a"]),
        ([("a", 1, 1.0), ("b", 1, 1.0)], 1, 0, ["a"]),  # ties: by address, stable
        # Unused for longer than the age limit: gone even with room to spare.
        ([("old", 1, 100.0 - 15 * DAY), ("new", 1, 99.0)], 100, 0, ["old"]),
    ],
)
def test_eviction_keeps_the_bound_dropping_the_least_recently_used(
    objects: list[tuple[str, int, float]], max_bytes: int, incoming: int, evicted: list[str]
) -> None:
    cached = [Cached(a, size, used) for a, size, used in objects]
    gone = to_evict(cached, max_bytes=max_bytes, max_age_s=14 * DAY, now=100.0, incoming=incoming)
    assert gone == evicted
    kept = sum(c.size for c in cached if c.address not in gone)
    assert kept + incoming <= max_bytes or not cached


class Clock:
    now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def put(store: Store, key: str, data: bytes) -> None:
    from processors.storage.crc64 import Crc64

    crc = Crc64()
    crc.update(data)
    store.put(key, _Body(data), len(data), crc.value, "etag")


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, n: int) -> bytes:
        chunk, self.data = self.data[:n], self.data[n:]
        return chunk


def test_the_store_stays_within_its_bound_and_sweeps_old_objects(tmp_path: Path) -> None:
    clock = Clock()
    store = Store(tmp_path, max_bytes=10, max_age_s=14 * DAY, clock=clock)
    keys = [address(f"e{i}", 4) for i in range(3)]
    for key in keys:
        clock.now += 1
        put(store, key, b"1234")
    assert store.get(keys[0]) is None  # the least recently used made room
    assert {c.address for c in store.cached()} == set(keys[1:])
    assert sum(c.size for c in store.cached()) <= 10
    clock.now += 1
    assert store.get(keys[1]) is not None  # a read is a use: keys[2] is older now
    clock.now += 1
    put(store, address("e3", 4), b"abcd")
    assert store.get(keys[2]) is None and store.get(keys[1]) is not None
    with pytest.raises(Refused) as too_big:
        put(store, address("big", 11), b"x" * 11)
    assert too_big.value.status == 413
    with pytest.raises(Refused, match="CRC-64"):
        store.put(address("bad", 4), _Body(b"1234"), 4, 12345, "etag")
    clock.now += 15 * DAY
    assert sorted(store.sweep()) == sorted([keys[1], address("e3", 4)])
    assert store.cached() == [] and list((tmp_path / "incoming").iterdir()) == []


CACHE_TOKEN = "node-cache-token-for-tests"
AUTH = {"Authorization": f"Bearer {CACHE_TOKEN}"}


@pytest.fixture
def cache_server(tmp_path: Path) -> Iterator[CacheServer]:
    store = Store(tmp_path / "node-cache", max_bytes=1 << 30, max_age_s=14 * DAY)
    server = CacheServer(store, "127.0.0.1", 0, token=CACHE_TOKEN)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def repo(oss_server: OssServer, oss_env: dict[str, str]) -> tuple[str, dict[str, bytes]]:
    """A small repository of its own (tests here change objects)."""
    prefix = f"cache-test/{uuid.uuid4().hex[:8]}"
    files = {
        "add_sub/config.pbtxt": b'name: "add_sub"\n',
        "add_sub/1/model.py": b"print('model')\n" * 100,
        "big/1/model.bin": bytes(range(256)) * 4096,  # 1 MiB: ranged parts
    }
    for path, data in files.items():
        oss_server.put(BUCKET, f"{prefix}/{path}", data)
    return f"oss://{BUCKET}/{prefix}", files


def served(oss: OssServer) -> int:
    return oss.bytes_served()


def test_a_second_pull_on_the_node_downloads_nothing_from_oss(
    oss_server: OssServer, repo: tuple[str, dict[str, bytes]], cache_server: CacheServer,
    tmp_path: Path,
) -> None:  # fmt: skip
    uri, files = repo
    cache = NodeCache(cache_server.url, CACHE_TOKEN)
    first = pull(uri, tmp_path / "pod-1" / "repository", node_cache=cache, part_size=256 << 10)
    total = sum(len(d) for d in files.values())
    assert (first.bytes_downloaded, first.bytes_from_cache) == (total, 0)
    assert served(oss_server) == total

    # A new pod on the same node: an empty emptyDir, the same objects.
    second = pull(uri, tmp_path / "pod-2" / "repository", node_cache=cache, part_size=256 << 10)
    assert served(oss_server) == total  # not one more byte from OSS
    assert (second.bytes_downloaded, second.bytes_from_cache) == (0, total)
    for path, data in files.items():
        assert (tmp_path / "pod-2" / "repository" / path).read_bytes() == data


def test_a_changed_etag_is_a_miss(
    oss_server: OssServer, repo: tuple[str, dict[str, bytes]], cache_server: CacheServer,
    tmp_path: Path,
) -> None:  # fmt: skip
    uri, files = repo
    cache = NodeCache(cache_server.url, CACHE_TOKEN)
    pull(uri, tmp_path / "pod-1" / "repository", node_cache=cache)
    key = uri.removeprefix(f"oss://{BUCKET}/") + "/add_sub/config.pbtxt"
    oss_server.put(BUCKET, key, b'name: "add_sub"\nmax_batch_size: 8\n')  # a new ETag
    oss_server.reset()

    again = pull(uri, tmp_path / "pod-2" / "repository", node_cache=cache)
    assert oss_server.bytes_served(key) == len(b'name: "add_sub"\nmax_batch_size: 8\n')
    assert served(oss_server) == oss_server.bytes_served(key)  # the rest came from the cache
    assert again.bytes_from_cache == sum(len(d) for d in files.values()) - len(files[
        "add_sub/config.pbtxt"])  # fmt: skip
    assert (
        b"max_batch_size" in (tmp_path / "pod-2" / "repository/add_sub/config.pbtxt").read_bytes()
    )


def test_a_corrupted_cached_object_is_fetched_again_and_the_cache_repaired(
    oss_server: OssServer, repo: tuple[str, dict[str, bytes]], cache_server: CacheServer,
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    uri, files = repo
    cache = NodeCache(cache_server.url, CACHE_TOKEN)
    pull(uri, tmp_path / "pod-1" / "repository", node_cache=cache)
    data = files["big/1/model.bin"]
    (big,) = [c.address for c in cache_server.store.cached() if c.size == len(data)]
    stored = cache_server.store.objects / big
    damaged = bytearray(stored.read_bytes())
    damaged[1000] ^= 0xFF  # a bit flip on the node's disk
    stored.write_bytes(bytes(damaged))
    oss_server.reset()

    again = pull(uri, tmp_path / "pod-2" / "repository", node_cache=cache)
    assert (tmp_path / "pod-2" / "repository" / "big/1/model.bin").read_bytes() == data
    assert served(oss_server) == len(data)  # only the damaged file, from OSS
    assert again.bytes_from_cache == sum(len(d) for d in files.values()) - len(data)
    assert "corrupted" in caplog.text
    assert stored.read_bytes() == data  # offered again: repaired


def test_the_server_answers_misses_and_refuses_bad_uploads(cache_server: CacheServer) -> None:
    key = address("etag", 4)
    with pytest.raises(urllib.error.HTTPError) as miss:
        urllib.request.urlopen(
            urllib.request.Request(f"{cache_server.url}/objects/{key}", headers=AUTH), timeout=5
        )
    assert miss.value.code == 404
    bad = urllib.request.Request(
        f"{cache_server.url}/objects/{key}",
        data=b"1234",
        headers={**AUTH, "Content-Length": "4", CRC_HEADER: "1"},
        method="PUT",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(bad, timeout=5)
    assert refused.value.code == 400 and b"CRC-64" in refused.value.read()
    with urllib.request.urlopen(f"{cache_server.url}/healthz", timeout=5) as health:
        assert health.status == 200


def test_an_unreachable_cache_only_costs_the_download(
    oss_server: OssServer, repo: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    uri, files = repo
    report = pull(
        uri, tmp_path / "repository", node_cache=NodeCache("http://127.0.0.1:9", CACHE_TOKEN)
    )
    assert report.bytes_downloaded == sum(len(d) for d in files.values())


def test_pulls_use_the_cache_named_in_the_environment(
    oss_server: OssServer, repo: tuple[str, dict[str, bytes]], cache_server: CacheServer,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    uri, _ = repo
    monkeypatch.setenv(ENV_URL, cache_server.url)
    monkeypatch.setenv(TOKEN_ENV, CACHE_TOKEN)
    repository.pull(uri, tmp_path / "a", endpoint=None)
    oss_server.reset()
    assert repository.pull(uri, tmp_path / "b", endpoint=None).bytes_downloaded == 0
    assert served(oss_server) == 0


def test_the_local_runtimes_shared_cache_pulls_once_per_host(
    oss_server: OssServer, repo: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    """Replicas of the local runtime share ``<data dir>/models`` (OPENEAS_MODEL_CACHE): the
    second replica's pull finds the copy current and downloads nothing."""
    uri, files = repo
    models = tmp_path / "data" / "models"
    repository.local_repository(uri, models, endpoint=None)
    assert served(oss_server) == sum(len(d) for d in files.values())
    oss_server.reset()
    local = repository.local_repository(uri, models, endpoint=None)
    assert served(oss_server) == 0
    assert (local / "add_sub/config.pbtxt").read_bytes() == files["add_sub/config.pbtxt"]


@pytest.mark.parametrize("token", [None, "wrong", CACHE_TOKEN + "x"])
def test_reads_and_uploads_need_the_cache_token(
    cache_server: CacheServer, token: str | None
) -> None:
    """What a replica's own code could send (it shares the pod's address with the pull, but
    not the pull's token): no read, and no object planted under a model's address."""
    data = b"planted bytes"
    key = address("etag-of-a-public-model", len(data))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    crc = Crc64()
    crc.update(data)
    plant = urllib.request.Request(
        f"{cache_server.url}/objects/{key}",
        data=data,
        headers={**headers, "Content-Length": str(len(data)), CRC_HEADER: str(crc.value)},
        method="PUT",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(plant, timeout=5)
    assert refused.value.code == 401
    read = urllib.request.Request(f"{cache_server.url}/objects/{key}", headers=headers)
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(read, timeout=5)
    assert denied.value.code == 401
    assert cache_server.store.cached() == []
    # The pull's own token stores it.
    plant.headers["Authorization"] = f"Bearer {CACHE_TOKEN}"
    with urllib.request.urlopen(plant, timeout=5) as stored:
        assert stored.status == 201
