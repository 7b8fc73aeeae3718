"""Smooth weighted round-robin: exact shares, interleaved, members coming and going."""

from __future__ import annotations

from collections import Counter

import pytest

from gateway.traffic import SmoothWeighted


@pytest.mark.parametrize(
    ("weights", "picks"),
    [
        ({"a": 1, "b": 1}, "abab"),
        ({"a": 5, "b": 1, "c": 1}, "aabacaa"),  # nginx's example: interleaved, not aaaaabc
        ({"a": 3, "b": 0}, "aaa"),  # weight 0 takes nothing
        ({"a": 0}, ""),
    ],
)
def test_sequence(weights: dict[str, int], picks: str) -> None:
    picker = SmoothWeighted()
    got = [picker.pick(weights.items()) for _ in range(len(picks) or 1)]
    assert "".join(g or "" for g in got) == picks


def test_every_window_of_the_weight_sum_is_exact() -> None:
    picker = SmoothWeighted()
    weights = {"a": 1, "b": 2, "c": 7}
    picks = [picker.pick(weights.items()) for _ in range(10_000)]
    for start in range(0, 10_000, 10):
        assert Counter(picks[start : start + 10]) == weights


def test_a_member_leaving_and_joining() -> None:
    picker = SmoothWeighted()
    for _ in range(3):
        picker.pick([("a", 1), ("b", 1)])
    assert {picker.pick([("a", 1)]) for _ in range(3)} == {"a"}
    picks = Counter(picker.pick([("a", 1), ("c", 3)]) for _ in range(400))
    assert picks == {"a": 100, "c": 300}
