"""Pull progress: the meter's arithmetic (pure, on a fake clock), and the reports a real pull
publishes through the progress file while a slow object comes from the OSS stand-in."""

from __future__ import annotations

import importlib
import threading
import time
import uuid
from pathlib import Path

import pytest

from contract.progress import Progress, describe
from processors import progress, repository
from testing.oss_server import OssServer
from tests.fixtures_oss import BUCKET, oss_bucket

pull_module = importlib.import_module("processors.storage.pull")  # the module, not the function


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_meter_reports_rate_and_eta_at_most_every_interval() -> None:
    clock, seen = Clock(), list[Progress]()
    meter = progress.Meter(
        seen.append, files_total=3, bytes_total=1000, files_done=1, bytes_done=200, clock=clock
    )
    assert seen == [Progress("pulling", 1, 3, 200, 1000)]  # where it starts: reused counts
    meter.add(100)  # within the interval: counted, not reported
    clock.now += 1.0
    meter.add(100)
    meter.file_done()  # within the interval again
    assert seen[1:] == [Progress("pulling", 1, 3, 400, 1000, rate=200.0, eta_s=3.0)]
    clock.now += 1.0
    meter.finish()
    assert seen[-1] == Progress("pulled", 3, 3, 400, 1000, rate=200.0, eta_s=0.0)
    assert meter.fetched == 200


def test_describe_reads_like_a_progress_line() -> None:
    mid = Progress("pulling", 3, 10, 1_200_000_000, 4_000_000_000, 25e6, 112.0)
    assert describe(mid) == ("pulling 1.2 GB of 4.0 GB (30%), 3/10 files, 25.0 MB/s, ETA 1m52s")
    assert describe(mid.as_dict()) == describe(mid)  # as the API hands it to eascmd
    assert describe(Progress("pulling", 0, 2, 0, 512)) == "pulling 0 B of 512 B (0%), 0/2 files"
    assert describe(Progress("pulled", 2, 2, 5_000, 5_000)) == "pulled 5.0 KB, 2 files"


def test_progress_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "0.progress"
    assert progress.read_file(target) is None  # not written yet
    sink = progress.sink_from({progress.ENV_FILE: str(target)})
    sink(Progress("pulling", 0, 1, 0, 10))
    sink(Progress("pulling", 0, 1, 5, 10))
    assert progress.read_file(target) == Progress("pulling", 0, 1, 5, 10)
    assert [p.name for p in tmp_path.iterdir()] == ["0.progress"]
    target.write_text("{half")
    assert progress.read_file(target) is None


def test_a_slow_pull_publishes_progress_until_done(
    oss_server: OssServer,
    oss_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pull_module, "PROGRESS_INTERVAL", 0.05)
    prefix = f"p-{uuid.uuid4().hex[:8]}"
    big, small = 3 << 20, 1000
    bucket = oss_bucket(oss_server)
    bucket.put_object(f"{prefix}/m/1/model.bin", b"x" * big)
    bucket.put_object(f"{prefix}/m/config.pbtxt", b"y" * small)
    oss_server.slow_next(rate=3e6, match=lambda call: call.key.endswith("model.bin"))
    report = tmp_path / "replica.progress"
    monkeypatch.setenv(progress.ENV_FILE, str(report))

    pulled = threading.Thread(
        target=repository.pull,
        args=(f"oss://{BUCKET}/{prefix}", tmp_path / "repo"),
        kwargs={"endpoint": None},
    )
    pulled.start()
    midway: list[Progress] = []
    deadline = time.monotonic() + 30
    while pulled.is_alive() and time.monotonic() < deadline:
        now = progress.read_file(report)
        if now is not None and now.phase == "pulling" and 0 < now.bytes_done < big + small:
            midway.append(now)
        time.sleep(0.01)  # the poll's pace; the assertions below do not depend on timing
    pulled.join(timeout=30)

    assert midway, "no report while the slow object was coming"
    first = midway[0]
    assert (first.files_total, first.bytes_total) == (2, big + small)
    assert first.rate > 0 and first.eta_s is not None and first.eta_s > 0
    assert [p.bytes_done for p in midway] == sorted(p.bytes_done for p in midway)
    final = progress.read_file(report)
    assert final is not None
    assert (final.phase, final.files_done, final.bytes_done, final.eta_s) == (
        "pulled",
        2,
        big + small,
        0.0,
    )
