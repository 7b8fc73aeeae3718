"""Benchmark of the model-repository pull against the local OSS stand-in.

Run by hand (``python bench/pull.py [--mib 256]``) to get the figures quoted in the pull's
closing note. It starts ``testing/oss_server.py`` as a separate process (so server and client do
not share one interpreter lock), uploads a generated repository of ``--mib`` MiB (many small
files plus one large file, random bytes), then measures on the same server, in this order:

1. baseline: one plain single-stream GET per object, sequentially, written to disk
   (no verification);
2. the same with oss2's own CRC64 check (``enable_crc=True``, oss2's default), for reference:
   the pull verifies every byte too;
3. cold pull: :func:`processors.storage.pull` into an empty destination;
4. cached pull: the same pull again (nothing changed, so nothing should be downloaded).

Steps 1-3 run ``--repeat`` times, interleaved, and the best time of each is kept, because
other processes on the machine add noise. Dirty pages are flushed before each measurement so
one step's disk writeback does not land on the next. It prints throughput in MB/s (10^6 bytes
per second), the ratio cold-pull/baseline, the cached pull's time, and this process's peak RSS
(memory stays bounded: everything is streamed).
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import oss2

from processors.storage import pull

ROOT = Path(__file__).resolve().parent.parent
KEY_ID, SECRET, BUCKET = "LTAI5tBenchKey", "bench-secret", "bench-models"
CHUNK = 1 << 20
MiB = 1 << 20


@contextmanager
def stand_in() -> Iterator[str]:
    """Run ``testing.oss_server`` in a child process; yield its endpoint."""
    argv = [sys.executable, "-m", "testing.oss_server", "--access-key-id", KEY_ID]
    argv += ["--access-key-secret", SECRET, "--bucket", BUCKET]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if line[:1] != ["endpoint"]:
            raise RuntimeError("the OSS stand-in did not start")
        yield line[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def generate(root: Path, total_mib: int, seed: int = 7) -> list[Path]:
    """A model-repository-shaped tree: one large file with 3/4 of the bytes, the rest in
    files of 16 KiB-1 MiB spread over models/versions, written chunk by chunk."""
    rng = random.Random(seed)
    large = total_mib * MiB * 3 // 4
    files = [(root / "llm/1/model.plan", large)]
    left, i = total_mib * MiB - large, 0
    while left > 0:
        size = min(left, rng.randint(16 << 10, 1 << 20))
        files.append((root / f"model_{i // 8:03d}/{i % 4 + 1}/part_{i:04d}.bin", size))
        left, i = left - size, i + 1
    for path, size in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            for offset in range(0, size, CHUNK):
                f.write(os.urandom(min(CHUNK, size - offset)))
    return [path for path, _ in files]


def upload(bucket: oss2.Bucket, root: Path, files: list[Path]) -> None:
    def put(path: Path) -> None:
        bucket.put_object_from_file(f"models/{path.relative_to(root).as_posix()}", str(path))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, files))


def single_stream_get(bucket: oss2.Bucket, dest: Path) -> float:
    """Every object, one after another, over one connection, straight to disk; seconds."""
    started = time.perf_counter()
    for obj in oss2.ObjectIteratorV2(bucket, prefix="models/", max_keys=1000):
        target = dest / obj.key
        target.parent.mkdir(parents=True, exist_ok=True)
        body = bucket.get_object(obj.key)
        with target.open("wb") as f:
            while chunk := body.read(CHUNK):
                f.write(chunk)
        if bucket.enable_crc and body.client_crc != body.server_crc:
            raise RuntimeError(f"CRC64 mismatch on {obj.key}")
    return time.perf_counter() - started


def show(label: str, seconds: float, size: int) -> float:
    rate = size / seconds / 1e6
    print(f"{label:<40} {seconds:8.2f} s  {rate:9.1f} MB/s")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark the OSS model pull.")
    parser.add_argument("--mib", type=int, default=256, help="repository size in MiB")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--part-mib", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="keep the best of this many runs")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="openeas-bench-") as tmp, stand_in() as endpoint:
        work = Path(tmp)
        files = generate(work / "source", args.mib)
        size = sum(p.stat().st_size for p in files)
        # Plain oss2 as a user would write it, without the client-side CRC pass.
        auth = oss2.Auth(KEY_ID, SECRET)
        plain = oss2.Bucket(auth, endpoint, BUCKET, enable_crc=False)
        checked = oss2.Bucket(auth, endpoint, BUCKET)
        upload(checked, work / "source", files)
        os.environ.update(
            OSS_ACCESS_KEY_ID=KEY_ID, OSS_ACCESS_KEY_SECRET=SECRET, OSS_ENDPOINT=endpoint
        )
        print(f"repository: {len(files)} files, {size / MiB:.0f} MiB ({size / 1e6:.1f} MB)")
        print(f"pull: workers={args.workers}, part size={args.part_mib} MiB, CPUs={os.cpu_count()}")

        uri = f"oss://{BUCKET}/models"
        pull_into = functools.partial(
            pull, uri, workers=args.workers, part_size=args.part_mib * MiB
        )
        best = {"plain": float("inf"), "crc": float("inf"), "pull": float("inf")}
        for run in range(args.repeat):
            for name, bucket in (("plain", plain), ("crc", checked)):
                os.sync()
                best[name] = min(best[name], single_stream_get(bucket, work / f"{name}{run}"))
                shutil.rmtree(work / f"{name}{run}")
            os.sync()
            cold = pull_into(work / f"pulled{run}")
            assert (cold.files, cold.bytes_downloaded) == (len(files), size)
            best["pull"] = min(best["pull"], cold.seconds)
            if run < args.repeat - 1:
                shutil.rmtree(work / f"pulled{run}")

        baseline = show("baseline: single-stream GET", best["plain"], size)
        show("single-stream GET + oss2 CRC64 check", best["crc"], size)
        rate = show("cold pull (parallel, CRC64-checked)", best["pull"], size)
        os.sync()
        cached = pull_into(work / f"pulled{args.repeat - 1}")
        assert cached.bytes_downloaded == 0
        print(f"{'cached pull (nothing changed)':<40} {cached.seconds:8.2f} s")
        print(f"ratio cold pull / baseline: {rate / baseline:.2f}")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of this process: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
