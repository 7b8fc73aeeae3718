"""``bench/scale.py --base``: each printed figure of this checkout over the base's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # its sibling imports
from bench.scale import leading_number, ratios

sys.path.pop(0)


@pytest.mark.parametrize(
    ("figure", "number"),
    [
        ("173/s", 173.0),
        ("1.4 / 9.8 ms", 1.4),  # p50 / p99: the p50
        ("12 ms", 12.0),
        ("3.5 MiB for 2002 routes", 3.5),
        ("0.41 %", 0.41),
        ("", None),
    ],
)
def test_a_figure_is_compared_by_its_first_number(figure: str, number: float | None) -> None:
    assert leading_number(figure) == number


def test_each_figure_is_shown_over_the_bases_and_a_missing_or_zero_one_as_na() -> None:
    ours = {
        "create rate": "200/s",
        "describe p50/p99": "1.0 / 2.0 ms",
        "idle": "0.20 %",
        "new": "1 ms",
    }
    base = {"create rate": "160/s", "describe p50/p99": "4.0 / 8.0 ms", "idle": "0.00 %"}
    assert ratios(ours, base) == {
        "create rate": "1.25x",
        "describe p50/p99": "0.25x",
        "idle": "n/a",
        "new": "n/a",
    }
