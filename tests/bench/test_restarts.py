"""What the benches say of a replica that started again during a run (``bench/deploy.py``):
a failed row whose replica crashed is named as the replica's failure, with its crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.deploy import Platform, replica_restarts, restarts
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


@pytest.mark.parametrize(
    ("lines", "port"),
    [
        ([start(0), "I1204 started HTTPService"], 40000),
        ([start(0), *ABORT, start(1), "started"], 40001),  # as it last started
        (["not started yet"], None),
    ],
)
def test_a_platforms_replica_port_is_the_one_it_last_started_on(
    tmp_path: Path, lines: list[str], port: int | None
) -> None:
    platform = Platform(Path("."), tmp_path)
    log = tmp_path / "data" / "logs" / "svc" / "0.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(lines) + "\n")
    if port is None:
        with pytest.raises(RuntimeError, match="no start"):
            platform.replica_port("svc")
    else:
        assert platform.replica_port("svc") == port
