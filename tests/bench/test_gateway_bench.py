"""``bench/gateway.py``'s rounds: the round-by-round ratio (the median of the per-round
ratios, which a drift of the machine's speed over the run moves less than a ratio of
medians), the order of the targets, which turns each round, and the logs a failed run
keeps."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # it imports its sibling `deploy` as a script does
    try:
        spec = importlib.util.spec_from_file_location("bench_gateway_ratio", BENCH / "gateway.py")
        assert spec is not None and spec.loader is not None
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize(
    ("ours", "theirs", "shown"),
    [
        # The machine slows down over the run: both sides of each round alike.
        ([1000, 800, 600], [1000, 800, 600], "1.00x (1.00-1.00)"),
        # A ratio of medians would read 900/800 = 1.12x; round by round it is 1.00 to 1.50.
        ([900, 1200, 600], [900, 800, 600], "1.00x (1.00-1.50)"),
        ([950, 760], [1000, 800], "0.95x (0.95-0.95)"),
        ([100], [0], "n/a"),
    ],
)
def test_round_by_round_ratio(
    bench: ModuleType, ours: list[float], theirs: list[float], shown: str
) -> None:
    def runs(rps: list[float]) -> list[object]:
        return [bench.WrkResult(r, 0, 0, 1, 0.0) for r in rps]

    assert bench.paired_ratio(runs(ours), runs(theirs)) == shown


@pytest.mark.parametrize(
    ("targets", "round_no", "order"),
    [
        (["direct", "nginx", "gateway"], 0, ["direct", "nginx", "gateway"]),
        (["direct", "nginx", "gateway"], 1, ["nginx", "gateway", "direct"]),
        (["direct", "nginx", "gateway"], 2, ["gateway", "direct", "nginx"]),
        (["direct", "nginx", "gateway"], 3, ["direct", "nginx", "gateway"]),
        (["nginx"], 5, ["nginx"]),
        ([], 1, []),
    ],
)
def test_each_round_starts_one_target_later(
    bench: ModuleType, targets: list[str], round_no: int, order: list[str]
) -> None:
    assert bench.round_order(targets, round_no) == order


def test_a_failed_run_keeps_every_log_of_its_temporary_directory(
    bench: ModuleType, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    (run / "up" / "data" / "replicas").mkdir(parents=True)
    (run / "triton.log").write_text("triton\n")
    (run / "up" / "up.log").write_text("platform\n")
    (run / "up" / "data" / "replicas" / "bench-0.log").write_text("replica\n")
    (run / "add_sub.body").write_bytes(b"\0" * 16)  # not a log
    kept = bench.keep_logs(run)
    try:
        files = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
        assert files == ["triton.log", "up/data/replicas/bench-0.log", "up/up.log"]
        assert (kept / "up" / "up.log").read_text() == "platform\n"
    finally:
        shutil.rmtree(kept)
