"""What the benches say of a replica that started again during a run (``bench/deploy.py``):
a failed row whose replica crashed is named as the replica's failure, with its crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.deploy import replica_restarts, restarts
from controlplane.runtime.local import START_MARKER

ABORT = [
    "terminate called after throwing an instance of 'boost::interprocess::lock_exception'",
    "  what():  boost::interprocess::lock_exception",
    "Signal (6) received.",
    " 0# 0x000055D935DE452D in tritonserver",
]


def start(n: int) -> str:
    return f"{START_MARKER}{n} on port {40000 + n}"


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ([start(0), "I1204 started HTTPService"], []),  # one start: nothing to say
        ([start(0), "started", *ABORT, start(1), "started"], [ABORT[0]]),
        ([start(0), "Signal (11) received.", start(1)], ["Signal (11) received."]),
        ([start(0), "bye", start(1), *ABORT, start(2)], ["", ABORT[0]]),  # exited, then crashed
        (["a line from before any start", *ABORT], []),  # not a replica's log
        ([f"  {start(0)}", start(0)], []),  # the marker counts only at a line's start
    ],
)
def test_each_start_again_is_said_with_the_first_line_of_its_crash(
    lines: list[str], why: list[str]
) -> None:
    assert restarts("\n".join(lines) + "\n", START_MARKER) == why


def test_the_platforms_replicas_that_started_again_are_named(tmp_path: Path) -> None:
    logs = tmp_path / "base-up" / "data" / "logs" / "bench"
    logs.mkdir(parents=True)
    crashed = [start(0), *ABORT, start(1), *ABORT, start(2), "serving"]
    (logs / "0.log").write_text("\n".join(crashed) + "\n")
    (logs / "1.log").write_text(start(0) + "\nserving\n")  # started once
    calm = tmp_path / "up" / "data" / "logs" / "bench"
    calm.mkdir(parents=True)
    (calm / "0.log").write_text(start(0) + "\n")
    assert replica_restarts(tmp_path) == [
        f"base-up's replica bench/0 started again 2 time(s): {ABORT[0]} (x2)"
    ]
    assert replica_restarts(tmp_path / "up") == []  # no platform below it
