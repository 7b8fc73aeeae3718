"""Pull progress as log lines: what a pull without a progress file prints (a Kubernetes init
container's log) and what the runtime reads back from the log's tail. Pure."""

from __future__ import annotations

import pytest

from contract.progress import LOG_MARK, Progress, from_log, log_line

MID = Progress("pulling", 3, 10, 1_200_000_000, 4_000_000_000, 25e6, 112.0)


def test_a_line_reads_for_people_and_parses_back() -> None:
    line = log_line(MID)
    assert line.startswith("openeas: pulling 1.2 GB of 4.0 GB (30%), 3/10 files, 25.0 MB/s")
    assert "\n" not in line
    assert from_log(line) == MID


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("", None),
        ("openeas: fetching oss://b/m\n", None),  # no report yet
        (f"{log_line(MID)}\nopeneas: retrying a part\n", MID),  # the last report wins
        (
            log_line(MID) + "\n" + log_line(Progress("pulled", 10, 10, 4, 4, eta_s=0.0)) + "\n",
            Progress("pulled", 10, 10, 4, 4, eta_s=0.0),
        ),
        (f"openeas: pulling{LOG_MARK}" + '{"phase": "pulling", "files_do', None),  # cut short
        (f"x{LOG_MARK}[1, 2]", None),  # not the fields
        (f"x{LOG_MARK}" + '{"phase": "pulling"}', None),  # fields missing
    ],
)
def test_the_last_report_in_a_tail(tail: str, expected: Progress | None) -> None:
    assert from_log(tail) == expected
