"""Smooth weighted round-robin: exact shares, interleaved, members coming and going."""

from __future__ import annotations

from collections import Counter

import pytest

from contract.wire import MirrorRoute
from gateway.routing.traffic import MirrorState, RatioPicker, SmoothWeighted


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


@pytest.mark.parametrize(
    ("ratio", "pattern"),
    [
        (0, "----------"),
        (10, "---------x"),
        (25, "---x---x---x"),
        (50, "-x-x-x"),
        (30, "---x--x--x"),  # spread evenly, not bunched
        (100, "xxxx"),
    ],
)
def test_ratio_picker_sequence(ratio: int, pattern: str) -> None:
    picker = RatioPicker(ratio)
    assert "".join("x" if picker.take() else "-" for _ in pattern) == pattern


@pytest.mark.parametrize("ratio", [1, 7, 33, 99])
def test_ratio_picker_is_exact_after_any_number_of_calls(ratio: int) -> None:
    picker = RatioPicker(ratio)
    taken = 0
    for n in range(1, 10_001):
        taken += picker.take()
        assert taken == n * ratio // 100


def test_mirror_state_keeps_its_count_while_the_ratio_stays() -> None:
    first = MirrorState.of(MirrorRoute(ratio=50, targets=["b"]), None)
    assert first is not None and not first.picker.take()
    same = MirrorState.of(MirrorRoute(ratio=50, targets=["b", "c"]), first)
    assert same is not None and same.picker is first.picker and same.picker.take()
    changed = MirrorState.of(MirrorRoute(ratio=20, targets=["b"]), same)
    assert changed is not None and changed.picker is not first.picker
    assert MirrorState.of(MirrorRoute(ratio=0, targets=["b"]), changed) is None
    assert MirrorState.of(None, changed) is None
