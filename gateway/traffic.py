"""How a group splits its traffic between members: smooth weighted round-robin (nginx's), a
pure object the route table keeps per group. Over any run of W = sum(weights) picks each
member is chosen exactly its weight's times, interleaved (not bunched, not random drift)."""

from __future__ import annotations

from collections.abc import Iterable


class SmoothWeighted:
    def __init__(self) -> None:
        self._current: dict[str, int] = {}

    def pick(self, weights: Iterable[tuple[str, int]]) -> str | None:
        """The member to send the next request to; None when no weight is positive. A member
        that joins starts at zero; one that leaves is forgotten."""
        current: dict[str, int] = {}
        total = 0
        best: str | None = None
        for name, weight in weights:
            if weight <= 0:
                continue
            total += weight
            current[name] = self._current.get(name, 0) + weight
            if best is None or current[name] > current[best]:
                best = name
        if best is not None:
            current[best] -= total
        self._current = current
        return best
