"""Which services drifted from what was last reconciled: a pure comparison of one query's
rows with one runtime listing, so the periodic resync reconciles only those (an unchanged
service costs a row and a dict lookup, no queries, no writes, no runtime calls).

Orphans (replicas with no row) are deleted only while they are a small share of what the
runtime runs: a database that lost its rows, or the wrong database, must not empty a
cluster (:func:`orphans_deletable`; ``openeas gc --confirm`` deletes beyond it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controlplane.runtime.base import ReplicaSummary


@dataclass(frozen=True)
class StoredSummary:
    """A service's row as the last reconcile left it."""

    name: str
    pending: bool  # a generation not acted on yet, or being deleted (the poll's work)
    replicas: int  # what was asked for (total_instances)
    running: int  # ready replicas as last written
    template_hash: str  # the replica template applied ("" when none could be)


class KeptRows:
    """The rows a resync compares, kept between its passes: the services with replicas
    (asked for or running) as of route version :attr:`version`. Each pass folds in only
    the rows stamped after that version and forgets those deleted since (:meth:`fold`), so
    an unchanged installation costs a pass no rows at all.

    Safe because every write that changes what a summary holds (pending, replicas asked
    for and running, template; a row made or deleted) stamps the row with a new route
    version, taken under the counter's lock held to its commit (:mod:`route_feed`):
    versions commit in order, so once a pass has read the counter at V, every change up to
    V is committed and in its read of the rows stamped after its last V. A change committed
    during the pass is stamped above V: the next pass reads it (again, if this one already
    did); none is skipped."""

    def __init__(self) -> None:
        self.version = -1  # nothing kept yet: the first pass reads every row with replicas
        self._rows: dict[str, StoredSummary] = {}

    def fold(
        self, version: int, changed: Iterable[StoredSummary], removed: Sequence[str] = ()
    ) -> None:
        """The rows stamped after :attr:`version` up to ``version``, and the names deleted
        meanwhile (forgotten first: a name deleted and made again is in ``changed``)."""
        for name in removed:
            self._rows.pop(name, None)
        for row in changed:
            if row.replicas or row.running:
                self._rows[row.name] = row
            else:
                self._rows.pop(row.name, None)
        self.version = version

    def reset(self) -> None:
        """Forget every row: the next pass reads them all again."""
        self._rows.clear()
        self.version = -1

    def unknown(self, observed: Iterable[str]) -> list[str]:
        """Names the runtime runs that no kept row holds (orphans, or rows at zero)."""
        return [name for name in observed if name not in self._rows]

    def rows(self) -> list[StoredSummary]:
        return list(self._rows.values())


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
