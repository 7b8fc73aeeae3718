"""The rows the resync compares, kept between its passes (:class:`KeptRows`): plain data
below the store, which folds what changed into it, and the reconciler, which compares it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from controlplane.model.states import StoredSummary


class KeptRows:
    """The rows a resync compares, kept between its passes: the services with replicas
    (asked for or running) as of route version :attr:`version`. Each pass folds in only
    the rows stamped after that version and forgets those deleted since (:meth:`fold`), so
    an unchanged installation costs a pass no rows at all.

    Safe because every write that changes what a summary holds (pending, replicas asked
    for and running, template; a row made or deleted) stamps the row with a new route
    version, taken under the counter's lock held to its commit
    (:mod:`controlplane.store.route_feed`): versions commit in order, so once a pass has
    read the counter at V, every change up to V is committed and in its read of the rows
    stamped after its last V. A change committed during the pass is stamped above V: the
    next pass reads it (again, if this one already did); none is skipped."""

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
