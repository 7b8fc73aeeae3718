"""Which services the bulk resync reconciles: a pure comparison, as a table."""

from __future__ import annotations

import pytest

from controlplane.model.kept_rows import KeptRows
from controlplane.model.states import StoredSummary
from controlplane.reconcile import resync
from controlplane.reconcile.resync import drifted
from controlplane.runtime.base import ReplicaSummary

H = frozenset({"h1"})


def row(name: str = "a", *, pending: bool = False, replicas: int = 2, running: int = 2,
        template: str = "h1") -> StoredSummary:  # fmt: skip
    return StoredSummary(name, pending, replicas, running, template)


@pytest.mark.parametrize(
    ("stored", "observed", "expected"),
    [
        ([row()], {"a": ReplicaSummary(2, 2, H)}, set()),  # as last written
        ([row()], {"a": ReplicaSummary(1, 1, H)}, {"a"}),  # a replica lost
        ([row()], {"a": ReplicaSummary(2, 1, H)}, {"a"}),  # one not ready any more
        ([row()], {"a": ReplicaSummary(2, 2, frozenset({"h0"}))}, {"a"}),  # an old template
        ([row()], {}, {"a"}),  # everything gone
        ([row(replicas=0, running=0)], {}, set()),  # stopped, nothing running
        ([row(replicas=0, running=0)], {"a": ReplicaSummary(0, 0, frozenset())}, set()),
        ([row(replicas=0, running=0)], {"a": ReplicaSummary(1, 1, H)}, {"a"}),  # still runs
        ([], {"ghost": ReplicaSummary(1, 1, H)}, {"ghost"}),  # an orphan
        ([row(pending=True)], {}, set()),  # the poll has it already
        ([row(template="")], {}, set()),  # nothing could be applied: waits for a change
        ([row("a"), row("b")], {"a": ReplicaSummary(2, 2, H)}, {"b"}),
    ],
)
def test_drifted(
    stored: list[StoredSummary], observed: dict[str, ReplicaSummary], expected: set[str]
) -> None:
    assert drifted(stored, observed) == expected


@pytest.mark.parametrize(
    ("orphans", "observed", "deletable"),
    [
        (0, 0, True),
        (0, 100, True),
        (1, 10, True),  # exactly the share
        (1, 11, True),
        (1, 9, False),  # a lone orphan among few services waits for `openeas gc --confirm`
        (10, 100, True),
        (11, 100, False),
        (3, 3, False),  # an empty or wrong database: everything looks orphaned
    ],
)
def test_orphans_deletable(orphans: int, observed: int, deletable: bool) -> None:
    assert resync.orphans_deletable(orphans, observed) is deletable


@pytest.mark.parametrize(
    ("kept", "changed", "removed", "expected"),
    [
        ([], [row("a")], [], {"a": 2}),  # made with replicas
        ([], [row("z", replicas=0, running=0)], [], {}),  # at zero: nothing to compare
        ([row("a")], [row("a", replicas=3)], [], {"a": 3}),  # scaled
        ([row("a")], [row("a", replicas=0, running=0)], [], {}),  # scaled to zero, all gone
        ([row("a")], [row("a", replicas=0, running=1)], [], {"a": 0}),  # one still runs
        ([row("a"), row("b")], [], ["a"], {"b": 2}),  # deleted
        ([row("a")], [row("a", replicas=1)], ["a"], {"a": 1}),  # deleted and made again
        ([row("a"), row("b")], [], [], {"a": 2, "b": 2}),  # nothing changed: nothing read
    ],
)
def test_kept_rows_fold_what_changed(
    kept: list[StoredSummary],
    changed: list[StoredSummary],
    removed: list[str],
    expected: dict[str, int],
) -> None:
    rows = KeptRows()
    rows.fold(1, kept)
    rows.fold(2, changed, removed)
    assert rows.version == 2
    assert {r.name: r.replicas for r in rows.rows()} == expected
    names = ["a", "b", "ghost"]
    assert rows.unknown(names) == [n for n in names if n not in expected]
