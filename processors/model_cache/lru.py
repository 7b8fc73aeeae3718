"""What the node cache drops: objects unused for longer than the age limit, then the least
recently used until what stays (and the object arriving) fits the size limit.

:meth:`processors.model_cache.store.Store.put` and :meth:`~.store.Store.sweep` call
:func:`to_evict` with what is on disk. Pure: tested as a table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Cached:
    address: str
    size: int
    last_used: float  # Unix seconds of its last read or write


def to_evict(
    objects: Iterable[Cached],
    *,
    max_bytes: int,
    max_age_s: float,
    now: float,
    incoming: int = 0,
) -> list[str]:
    """Addresses to delete, oldest use first, so that the rest plus ``incoming`` bytes fit
    in ``max_bytes`` and nothing left was unused for more than ``max_age_s``."""
    by_use = sorted(objects, key=lambda o: (o.last_used, o.address))
    evict: list[str] = []
    total = sum(o.size for o in by_use) + incoming
    for o in by_use:
        if now - o.last_used > max_age_s or total > max_bytes:
            evict.append(o.address)
            total -= o.size
    return evict
