"""Which services drifted from what was last reconciled: a pure comparison of one query's
rows with one runtime listing, so the periodic resync reconciles only those (an unchanged
service costs a row and a dict lookup, no queries, no writes, no runtime calls).

Orphans (replicas with no row) are deleted only while they are a small share of what the
runtime runs: a database that lost its rows, or the wrong database, must not empty a
cluster (:func:`orphans_deletable`; ``openeas gc --confirm`` deletes beyond it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controlplane.model.states import StoredSummary
from controlplane.runtime.base import ReplicaSummary

# The largest share of the runtime's services one resync deletes as orphans.
MAX_ORPHAN_SHARE = 0.10


def orphans(stored: Iterable[StoredSummary], observed: Mapping[str, ReplicaSummary]) -> set[str]:
    """Services the runtime runs that no row asks for."""
    return set(observed).difference(row.name for row in stored)


def orphans_deletable(orphans: int, observed: int, share: float = MAX_ORPHAN_SHARE) -> bool:
    """Whether one resync may delete ``orphans`` of the ``observed`` services: all of them
    when they are at most ``share`` of it, none otherwise (never a partial sweep)."""
    return orphans <= share * observed


def drifted(stored: Iterable[StoredSummary], observed: Mapping[str, ReplicaSummary]) -> set[str]:
    """Services to reconcile: orphans (running with no row), and rows whose replicas the
    runtime no longer shows as last written. Pending ones are the poll's already."""
    out = set(observed)
    for row in stored:
        out.discard(row.name)
        if row.pending or not row.template_hash:  # nothing applied: a new generation will
            continue
        seen = observed.get(row.name, ReplicaSummary(0, 0, frozenset()))
        templates = frozenset({row.template_hash}) if row.replicas else frozenset()
        if (seen.replicas, seen.ready, seen.templates) != (row.replicas, row.running, templates):
            out.add(row.name)
    return out
