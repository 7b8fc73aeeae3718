"""Each bench starts as a user runs it, ``python bench/<script> --help`` from the checkout:
the benches import their siblings by path tricks that only a fresh process checks."""

from __future__ import annotations

import subprocess
import sys

from tests.bench.scripts import BENCH


def test_every_bench_starts_from_the_command_line() -> None:
    scripts = sorted(p for p in BENCH.glob("*.py") if "argparse" in p.read_text())
    assert {"gateway.py", "grpc.py", "hotpath.py", "pull.py", "scale.py"} <= {
        p.name for p in scripts
    }
    runs = {
        p.name: subprocess.Popen(
            [sys.executable, str(p), "--help"],
            cwd=BENCH.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for p in scripts
    }
    failed = {}
    for name, run in runs.items():
        out, _ = run.communicate(timeout=120)
        if run.returncode != 0 or "usage:" not in out:
            failed[name] = out[-1500:]
    assert not failed, failed
