"""``bench/gateway.py``'s rounds: the round-by-round ratio (the median of the per-round
ratios, which a drift of the machine's speed over the run moves less than a ratio of
medians), the order of the targets, which turns each round, the logs a failed run keeps
with the record of its runs, and nginx@up following up's replica."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench.scripts import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("gateway.py", "bench_gateway_ratio")


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


def test_latency_calls_interleave_call_by_call_after_the_warm_up(bench: ModuleType) -> None:
    calls: list[str] = []

    class Probe:
        def __init__(self, name: str) -> None:
            self.name = name

        def call(self) -> float:
            calls.append(self.name)
            return float(len(calls))  # the order shows in the samples

    names = ["direct", "nginx", "gateway"]
    samples = bench.sequential_latency({name: Probe(name) for name in names}, 40, warmup=2)
    rounds = [calls[i : i + 3] for i in range(0, len(calls), 3)]
    assert len(rounds) == 42 and all(sorted(r) == sorted(names) for r in rounds)
    # The warm-up's calls are not sampled; each sample is its call's place in the run.
    for name in names:
        assert samples[name] == [
            float(6 + r.index(name) + 1 + 3 * i) for i, r in enumerate(rounds[2:])
        ]
    # No target always comes right after the same other (a warm or cold Triton would bias it).
    before = {(r[k - 1], r[k]) for r in rounds for k in (1, 2)}
    assert all(sum((a, b) in before for a in names if a != b) == 2 for b in names)


def test_call_orders_are_the_same_for_the_same_seed(bench: ModuleType) -> None:
    names = ["direct", "nginx", "gateway", "up", "up:replica"]
    assert list(bench.call_orders(names, 5)) == list(bench.call_orders(names, 5))
    assert list(bench.call_orders(names, 5)) != list(bench.call_orders(names, 5, seed=1))


@pytest.mark.parametrize(
    ("samples", "direct", "parts", "shown"),
    [
        # Each slice against direct Triton's calls of the same slice: a slow second half
        # moves both sides alike.
        ([2.0] * 10 + [5.0] * 10, [1.0] * 10 + [4.0] * 10, 2, " [+1.000..+1.000]"),
        ([2.0] * 10 + [4.5] * 10, [1.0] * 10 + [4.0] * 10, 2, " [+0.500..+1.000]"),
        ([2.0] * 19, [1.0] * 19, 2, ""),  # slices under 10 calls say nothing
    ],
)
def test_added_p50_range_is_per_slice_against_the_same_slice_of_direct(
    bench: ModuleType, samples: list[float], direct: list[float], parts: int, shown: str
) -> None:
    assert bench.added_p50_range(samples, direct, parts) == shown


# Stands in for nginx's master: says when it is ready, then counts each SIGHUP on a line.
HUP_COUNTER = """
import signal, sys, time
signal.signal(signal.SIGHUP, lambda *_: print("hup", flush=True))
print("ready", flush=True)
time.sleep(60)
"""


def test_nginx_in_front_of_a_replica_follows_it_to_the_port_it_starts_on_again(
    bench: ModuleType, tmp_path: Path
) -> None:
    """A replica of `up` that crashed starts again on another port: nginx@up's configuration
    names that port and its master is told to re-read it, once per move."""
    master = subprocess.Popen(
        [sys.executable, "-c", HUP_COUNTER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert master.stdout is not None and master.stdout.readline() == "ready\n"
        front = bench.Front("up", tmp_path / "nginx", port=8080, upstream=5001, pid=master.pid)
        bench.write_nginx_conf(front.home, 5001, front.port, "tok")
        front.follow(5001, "tok")  # the same port: nothing to do
        front.follow(5002, "tok")
        assert master.stdout.readline() == "hup\n"
        conf = (front.home / "nginx.conf").read_text()
        assert "server 127.0.0.1:5002;" in conf and "5001" not in conf
        assert "listen 127.0.0.1:8080;" in conf and front.upstream == 5002
    finally:
        master.kill()
        master.wait()
    # Only the one move signalled it.
    assert master.stdout.read() == ""


def test_each_wrk_run_is_recorded_with_when_it_ran_and_how_it_went(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runs.log: a replica's crash, timed in its own log, is matched to the run it fell in."""
    results = iter([bench.WrkResult(100.0, 0, 0, 300, 1.0), bench.WrkResult(50.0, 7, 2, 150, 2.0)])
    monkeypatch.setattr(bench, "run_wrk", lambda *args: next(results))
    record = tmp_path / "runs.log"
    assert bench.recorded_wrk(record, "add_sub c=8 round 1 up (warm-up)", 1, "x").requests == 300
    assert bench.recorded_wrk(record, "add_sub c=8 round 1 up", 1, "x").non200 == 7
    first, second = record.read_text().splitlines()
    stamp = r"\d\d:\d\d:\d\d\.\d{6}"
    assert re.fullmatch(
        rf"{stamp} - {stamp} add_sub c=8 round 1 up \(warm-up\): 300 requests, 0 non-200, "
        r"0 socket errors",
        first,
    )
    assert second.endswith("add_sub c=8 round 1 up: 150 requests, 7 non-200, 2 socket errors")
    assert first.split(" - ")[0] <= second.split(" - ")[0]


@pytest.mark.parametrize("new_connections", [False, True])
def test_wrk_is_asked_for_new_connections_and_read_for_its_tail(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_connections: bool
) -> None:
    """``--new-connections`` reaches wrk's script as BENCH_CLOSE, whose requests then say
    ``Connection: close``; the script's p99/p99.9/max come back as the run's tail."""
    asked: dict[str, str] = {}

    def wrk(argv: list[str], env: dict[str, str], **_: object) -> subprocess.CompletedProcess[str]:
        asked.update(env)
        out = "BENCH requests=300 duration_us=2000000 non200=0 sockerr=0 p50_us=2500 "
        return subprocess.CompletedProcess(argv, 0, out + "tail_us=9100,25400,31570\n")

    monkeypatch.setattr(bench.subprocess, "run", wrk)
    load = bench.Workload("add_sub", tmp_path / "body", 10, 1)
    r = bench.run_wrk(1, "http://x", "/p", load, "t", 8, 2.0, tmp_path / "l", new_connections)
    assert asked["BENCH_CLOSE"] == ("1" if new_connections else "0")
    assert (r.rps, r.p50_ms, r.tail_ms) == (150.0, 2.5, (9.1, 25.4, 31.57))
    assert 'os.getenv("BENCH_CLOSE") == "1" then wrk.headers["Connection"] = "close"' in (
        bench.WRK_LUA
    )


def test_the_tail_is_each_percentile_s_median_over_the_rounds(bench: ModuleType) -> None:
    runs = [
        bench.WrkResult(1.0, 0, 0, 1, 1.0, tail) for tail in [(5, 9, 30), (6, 8, 10), (7, 20, 11)]
    ]
    assert bench.tail(runs) == "6.0/9.0/11.0"


def test_the_signed_row_signs_as_eas_prediction_does(bench: ModuleType, tmp_path: Path) -> None:
    """What its probe and wrk send passes the gateway's check (itself tested against the
    SDK's own signatures), and would not with another body."""
    from gateway.routing.auth import verify_signed

    body = tmp_path / "add_sub.body"
    body.write_bytes(b'{"inputs": []}' + bytes(range(32)))
    path = "/api/predict/bench/v2/models/add_sub/infer"
    made = bench.eas_signed("t" * 32, path, bench.body_md5(body))
    headers = {k.lower().encode(): v.encode() for k, v in made.items()}
    assert verify_signed(b"t" * 32, "POST", path, headers, body.read_bytes()) is None
    refused = verify_signed(b"t" * 32, "POST", path, headers, body.read_bytes() + b" ")
    assert refused is not None and refused.kind == "content-md5-mismatch"
