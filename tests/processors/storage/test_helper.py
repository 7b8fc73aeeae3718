"""A second process for a pull's many small files (processors.storage.helper), alone and in
a pull run as ``openeas processor pull`` runs it: in a process of its own, one thread."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from processors.storage import PermanentStorageError, TemporaryStorageError
from processors.storage.helper import MANY, Report, start, wanted
from testing.oss_server import OssServer
from tests.fixtures_oss import BUCKET

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("files", "workers", "cpus", "threads", "expected"),
    [
        (MANY, 8, 2, 1, True),
        (MANY - 1, 8, 2, 1, False),  # a fork and a connection cost more than they save
        (MANY, 1, 2, 1, False),  # one connection asked for
        (MANY, 8, 1, 1, False),  # one CPU: nothing to share
        (MANY, 8, 2, 2, False),  # another thread might hold a lock the copy would inherit
    ],
)
def test_when_a_second_process_helps(
    files: int, workers: int, cpus: int, threads: int, expected: bool
) -> None:
    assert wanted(files, workers, cpus, threads) is expected


def lines_of(work: object) -> list[str]:
    helper = start(work)  # type: ignore[arg-type]
    try:
        return list(helper.lines(threading.Event()))
    finally:
        helper.close()


def test_reports_come_line_by_line_and_failures_as_raised() -> None:
    def fine(report: Report) -> None:
        for i in range(3000):  # more than a pipe holds
            report(f"{i} x")

    assert lines_of(fine) == [f"{i} x" for i in range(3000)]

    def refused(report: Report) -> None:
        report("0 x")
        raise PermanentStorageError("oss://b/m/a: access denied")

    with pytest.raises(PermanentStorageError, match="oss://b/m/a: access denied"):
        lines_of(refused)

    def killed(report: Report) -> None:
        report("0 x")
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(TemporaryStorageError, match=r"ended with -9: pull again"):
        lines_of(killed)


def test_a_stopped_pull_ends_its_helper() -> None:
    stop = threading.Event()

    def hung(report: Report) -> None:
        report("0 x")
        threading.Event().wait(60)

    helper = start(hung)
    lines = helper.lines(stop)
    assert next(lines) == "0 x"
    stop.set()
    assert list(lines) == []  # ended, not waited for: well before its 60 s
    helper.close()


PULL = """
import logging, sys
from pathlib import Path
from processors.storage.pull import pull
logging.basicConfig(level=logging.INFO, format="%(message)s")
print(pull(sys.argv[1], Path(sys.argv[2])).bytes_downloaded)
"""


def pull_alone(uri: str, dest: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-c", PULL, uri, str(dest)]
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_a_pull_alone_shares_many_small_files_with_a_second_process(
    oss_server: OssServer, oss_env: dict[str, str], tmp_path: Path
) -> None:
    base = f"many-{uuid.uuid4().hex[:6]}"
    files = {f"m{i % 7}/{i}/config.pbtxt": os.urandom(100 + i) for i in range(MANY + 10)}
    for path, data in files.items():
        oss_server.put(BUCKET, f"{base}/{path}", data)
    uri = f"oss://{BUCKET}/{base}"
    # The second biggest file is the helper's (every other one, biggest first).
    second = sorted(files, key=lambda p: -len(files[p]))[1]
    oss_server.corrupt_next(1, match=lambda c: c.key == f"{base}/{second}")

    failed = pull_alone(uri, tmp_path / "r")
    assert failed.returncode == 1, failed.stderr
    assert f"{base}/{second} ({len(files[second])} bytes): CRC64" in failed.stderr
    assert "differs from OSS's" in failed.stderr

    done = pull_alone(uri, tmp_path / "r")
    assert done.returncode == 0, done.stderr
    assert f"fetching {len(files) // 2} of {len(files)} small files in a second" in done.stderr
    assert int(done.stdout) == sum(map(len, files.values()))
    for path, data in files.items():
        assert (tmp_path / "r" / path).read_bytes() == data
    again = pull_alone(uri, tmp_path / "r")
    assert int(again.stdout) == 0  # the helper's files were recorded in the manifest too
