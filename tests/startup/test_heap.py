"""The start-up heap frozen out of the collector's full passes, and what still is collected."""

from __future__ import annotations

import gc
import weakref

from startup.heap import freeze_startup_heap


class Node:
    def __init__(self) -> None:
        self.peer: Node | None = None


def cycle() -> Node:
    a, b = Node(), Node()
    a.peer, b.peer = b, a
    return a


def test_what_start_up_built_leaves_the_full_pass(unfrozen_heap: None) -> None:
    kept = [cycle() for _ in range(10_000)]  # live, as modules and settings are
    walked = len(gc.get_objects())
    frozen = freeze_startup_heap()
    # The suite's other threads may free a frozen object meanwhile, never add one.
    assert frozen >= 20_000 and frozen - 100 <= gc.get_freeze_count() <= frozen
    # a full pass now walks only what came after: not those 20,000 nodes
    assert len(gc.get_objects()) < walked - 20_000
    assert not any(o is kept[0] for o in gc.get_objects())


def test_cycles_made_after_it_are_still_collected(unfrozen_heap: None) -> None:
    freeze_startup_heap()
    refs = [weakref.ref(cycle()) for _ in range(1_000)]  # a closed connection's garbage
    gc.collect()
    assert all(r() is None for r in refs)


def test_garbage_at_start_up_is_collected_before_the_freeze(unfrozen_heap: None) -> None:
    """Frozen garbage would stay for good: it is collected first."""
    gc.disable()  # the garbage waits, as it may when the freeze comes
    try:
        refs = [weakref.ref(cycle()) for _ in range(1_000)]
        freeze_startup_heap()
        assert all(r() is None for r in refs)
    finally:
        gc.enable()
