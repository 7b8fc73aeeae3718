"""How traffic is split, as pure objects the route table keeps: a group's between members by
smooth weighted round-robin (nginx's) — over any run of W = sum(weights) picks each member is
chosen exactly its weight's times, interleaved (not bunched, not random drift) — and the share
of a service's requests its mirror copies, by :class:`RatioPicker`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from contract.wire import MirrorRoute


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


class RatioPicker:
    """Says yes to exactly ``ratio`` of every 100 calls, evenly spread: an accumulator (as
    Bresenham's line), so after n calls exactly floor(n * ratio / 100) said yes."""

    __slots__ = ("_acc", "ratio")

    def __init__(self, ratio: int) -> None:
        self.ratio = ratio
        self._acc = 0

    def take(self) -> bool:
        self._acc += self.ratio
        if self._acc >= 100:
            self._acc -= 100
            return True
        return False


@dataclass(slots=True)
class MirrorState:
    """A mirrored service's mirror as the gateway uses it: the config and its picker."""

    route: MirrorRoute
    picker: RatioPicker

    @classmethod
    def of(cls, route: MirrorRoute | None, prev: MirrorState | None) -> MirrorState | None:
        """The state for ``route``; the picker keeps its count while the ratio stays."""
        if route is None or route.ratio <= 0 or not route.targets:
            return None
        if prev is not None and prev.picker.ratio == route.ratio:
            return cls(route, prev.picker)
        return cls(route, RatioPicker(route.ratio))
