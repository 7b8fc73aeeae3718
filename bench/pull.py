"""Benchmark of the model-repository pull against the local OSS stand-in.

Run by hand (``python bench/pull.py``) to get the figures quoted in the pull's closing notes.
It starts ``testing/oss_server.py`` as a separate process, uploads generated repositories
(random bytes) and measures three cases on the same server, each download as a fresh process
(so no run inherits another's connections, imports or GIL), dirty pages flushed before each:

1. ``mixed`` (``--mib``): one large file with 3/4 of the bytes plus files of 16 KiB-1 MiB;
2. ``small`` (``--small-files``): a repository of many small files (200 B-16 KiB, like the
   config.pbtxt, labels and version files of a real Triton repository);
3. ``big`` (``--big-mib``): one large object.

``--first-byte-ms`` makes the stand-in wait that long before each answer, as OSS's
first-byte latency does (a few ms in-region; the loopback has none, which leaves nothing for
parallel fetches to hide and measures CPU alone).

The baseline of each is plain ``oss2`` as a user would write it: one single-stream GET per
object, sequentially, over one connection, straight to disk, no verification. The pull
verifies every byte (CRC64, part by part). Each case prints both times and the ratio
baseline-time / pull-time (the issue's targets: ``big`` >= 0.9, ``small`` >= 2), then a
re-pull of the unchanged repository (which must download 0 bytes). Beside each time, the
download's CPU time per file (user and system, with the pull's helper process if it had
one; also the least of the runs), a steadier figure than time on a shared machine.

``--base DIR`` also measures the pull from another checkout (e.g. ``git worktree add
/tmp/perf-base main``) in the same run, interleaved, for before/after figures. Every
measurement runs ``--repeat`` times, interleaved, and the best is kept: other processes on
the machine only ever add time.
"""

from __future__ import annotations

import argparse
import json
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

ROOT = Path(__file__).resolve().parent.parent
KEY_ID, SECRET, BUCKET = "LTAI5tBenchKey", "bench-secret", "bench-models"
CHUNK = 1 << 20
MiB = 1 << 20


@contextmanager
def stand_in(first_byte_ms: float = 0.0) -> Iterator[str]:
    """Run ``testing.oss_server`` in a child process; yield its endpoint."""
    argv = [sys.executable, "-m", "testing.oss_server", "--access-key-id", KEY_ID]
    argv += ["--access-key-secret", SECRET, "--bucket", BUCKET]
    argv += ["--first-byte-ms", str(first_byte_ms)]
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


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for offset in range(0, size, CHUNK):
            f.write(os.urandom(min(CHUNK, size - offset)))


def mixed_tree(root: Path, total_mib: int, rng: random.Random) -> list[tuple[Path, int]]:
    large = total_mib * MiB * 3 // 4
    files = [(root / "llm/1/model.plan", large)]
    left, i = total_mib * MiB - large, 0
    while left > 0:
        size = min(left, rng.randint(16 << 10, 1 << 20))
        files.append((root / f"model_{i // 8:03d}/{i % 4 + 1}/part_{i:04d}.bin", size))
        left, i = left - size, i + 1
    return files


def small_tree(root: Path, count: int, rng: random.Random) -> list[tuple[Path, int]]:
    names = ("config.pbtxt", "labels.txt", "1/model.py", "2/model.py", "1/VERSION")
    return [
        (root / f"model_{i // len(names):04d}" / names[i % len(names)], rng.randint(200, 16 << 10))
        for i in range(count)
    ]


def upload(endpoint: str, prefix: str, root: Path, files: list[tuple[Path, int]]) -> int:
    import oss2

    bucket = oss2.Bucket(oss2.Auth(KEY_ID, SECRET), endpoint, BUCKET)

    def put(item: tuple[Path, int]) -> None:
        path, size = item
        write_random(path, size)
        bucket.put_object_from_file(f"{prefix}/{path.relative_to(root).as_posix()}", str(path))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, files))
    return sum(size for _, size in files)


# --- what a fresh process runs ----------------------------------------------------------


def cpu_seconds() -> float:
    """CPU time of this process and of its children that ended (a pull's helper process)."""
    own, ended = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime


def child_get(endpoint: str, prefix: str, dest: str) -> dict[str, float]:
    """Every object under ``prefix``, one after another, over one connection, to disk."""
    import oss2

    bucket = oss2.Bucket(oss2.Auth(KEY_ID, SECRET), endpoint, BUCKET, enable_crc=False)
    cpu, started = cpu_seconds(), time.perf_counter()
    for obj in oss2.ObjectIteratorV2(bucket, prefix=prefix + "/", max_keys=1000):
        target = Path(dest) / obj.key
        target.parent.mkdir(parents=True, exist_ok=True)
        body = bucket.get_object(obj.key)
        with target.open("wb") as f:
            while chunk := body.read(CHUNK):
                f.write(chunk)
    return {"seconds": time.perf_counter() - started, "cpu": cpu_seconds() - cpu}


def child_pull(endpoint: str, prefix: str, dest: str, workers: int, part: int) -> dict[str, float]:
    import oss2  # noqa: F401  (imported before the clock starts, as for the baseline)

    from processors.storage.pull import pull

    os.environ.update(OSS_ACCESS_KEY_ID=KEY_ID, OSS_ACCESS_KEY_SECRET=SECRET)
    sized = {"part_size": part} if part else {}  # else each tree's own default
    cpu = cpu_seconds()
    report = pull(
        f"oss://{BUCKET}/{prefix}", Path(dest), endpoint=endpoint, workers=workers, **sized
    )
    return {
        "seconds": report.seconds,
        "cpu": cpu_seconds() - cpu,
        "files": report.files,
        "downloaded": report.bytes_downloaded,
    }


def fresh(kind: str, tree: Path, *args: object) -> dict[str, float]:
    """Run ``child_<kind>`` in a new interpreter importing the project from ``tree``."""
    os.sync()
    env = dict(os.environ, PYTHONPATH=str(tree))
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", kind, *map(str, args)]
    out = subprocess.run(argv, env=env, cwd=tree, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{kind} failed:\n{out.stderr}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --- orchestration ----------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark the OSS model pull.")
    parser.add_argument("--mib", type=int, default=64, help="size of the mixed repository")
    parser.add_argument("--small-files", type=int, default=400)
    parser.add_argument("--big-mib", type=int, default=192)
    parser.add_argument("--cases", default="mixed,small,big")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--part-mib", type=int, default=0, help="ranged part size (0: the pull's own choice)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="keep the best of this many runs")
    parser.add_argument("--base", type=Path, help="another checkout to measure beside this one")
    parser.add_argument(
        "--first-byte-ms",
        type=float,
        default=0.0,
        help="the stand-in's latency per request, as OSS's first byte (0: loopback's)",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "get":
            print(json.dumps(child_get(*rest)))
        else:
            endpoint, prefix, dest, workers, part = rest
            print(json.dumps(child_pull(endpoint, prefix, dest, int(workers), int(part))))
        return

    rng = random.Random(7)
    trees = {"pull": ROOT} | ({"base pull": args.base.resolve()} if args.base else {})
    part = args.part_mib * MiB
    print(
        f"pull: workers={args.workers}, part size={args.part_mib or 'auto'} MiB, "
        f"CPUs={os.cpu_count()}, "
        f"first byte after {args.first_byte_ms:g} ms"
    )
    with (
        tempfile.TemporaryDirectory(prefix="openeas-bench-") as tmp,
        stand_in(args.first_byte_ms) as endpoint,
    ):
        work = Path(tmp)
        for case in args.cases.split(","):
            src = work / "source" / case
            if case == "mixed":
                files = mixed_tree(src, args.mib, rng)
            elif case == "small":
                files = small_tree(src, args.small_files, rng)
            else:
                files = [(src / "llm/1/model.plan", args.big_mib * MiB)]
            size = upload(endpoint, case, src, files)
            shutil.rmtree(src)
            print(f"\n== {case}: {len(files)} files, {size / 1e6:.1f} MB ==", flush=True)
            best = {name: float("inf") for name in ("plain GET", *trees)}
            cpu = dict.fromkeys(best, float("inf"))  # CPU seconds, also the least of the runs
            for run in range(args.repeat):
                got = fresh("get", ROOT, endpoint, case, work / f"get{run}")
                best["plain GET"] = min(best["plain GET"], got["seconds"])
                cpu["plain GET"] = min(cpu["plain GET"], got["cpu"])
                shutil.rmtree(work / f"get{run}")
                for name, tree in trees.items():
                    dest = work / f"{name}{run}".replace(" ", "-")
                    r = fresh("pull", tree, endpoint, case, dest, args.workers, part)
                    assert (r["files"], r["downloaded"]) == (len(files), size), r
                    best[name] = min(best[name], r["seconds"])
                    cpu[name] = min(cpu[name], r["cpu"])
                    if run < args.repeat - 1:
                        shutil.rmtree(dest)
            for name, seconds in best.items():
                line = f"  {name:<12} {seconds:8.3f} s  {size / seconds / 1e6:8.1f} MB/s"
                line += f"  CPU {cpu[name] / len(files) * 1e3:7.3f} ms/file"
                if name != "plain GET":
                    line += f"  ratio plain-GET-time / pull-time {best['plain GET'] / seconds:.2f}"
                print(line, flush=True)
            for name, tree in trees.items():
                dest = work / f"{name}{args.repeat - 1}".replace(" ", "-")
                again = fresh("pull", tree, endpoint, case, dest, args.workers, part)
                print(
                    f"  {name} again, unchanged: {again['seconds']:.3f} s, "
                    f"{again['downloaded']:.0f} bytes downloaded"
                )
                shutil.rmtree(dest)


if __name__ == "__main__":
    main()
