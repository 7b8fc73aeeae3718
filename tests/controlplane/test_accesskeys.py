"""controlplane.store.accesskeys on each database: secrets sealed at rest, revocation, nonces."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from controlplane.model.errors import InvalidSpec
from controlplane.store import accesskeys
from controlplane.store.accesskeys import AccessKeyNotFound, AccessKeys
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.tables import AccessKeyRow, NonceRow, utcnow


@pytest.fixture
def keys(database_url: str) -> Iterator[AccessKeys]:
    engine = make_engine(database_url)
    yield AccessKeys(make_sessions(engine), TokenSealer(["k" * 20]))
    engine.dispose()


def test_the_secret_is_sealed_at_rest_and_opened_for_checks(keys: AccessKeys) -> None:
    row, secret = keys.create("developer", ["team_a_*"], "ci")
    with keys._sessions() as s:
        stored = s.scalars(select(AccessKeyRow.secret)).one()
    assert stored.startswith("sealed:") and secret not in stored
    key = keys.lookup(row.id)
    assert key is not None and key.secret == secret
    assert (key.principal.name, key.principal.role, key.principal.services) == (
        row.id, "developer", ("team_a_*",))  # fmt: skip
    assert [r.id for r in keys.list()] == [row.id]


@pytest.mark.parametrize(
    ("role", "services", "field"),
    [("root", None, "Role"), ("viewer", ["Team*"], "Services[0]"), ("viewer", [""], "Services[0]")],
)
def test_bad_keys_are_refused_naming_the_field(
    keys: AccessKeys, role: str, services: list[str] | None, field: str
) -> None:
    with pytest.raises(InvalidSpec) as e:
        keys.create(role, services, "")
    assert [p.field for p in e.value.problems] == [field]
    assert keys.list() == []


def test_a_deleted_key_is_gone_within_the_cache_period(
    keys: AccessKeys, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    row, _ = keys.create("viewer", None, "")
    engine = make_engine(database_url)
    other = AccessKeys(make_sessions(engine), TokenSealer(["k" * 20]))
    assert other.lookup(row.id) is not None  # another replica, holding it
    keys.delete(row.id)
    assert keys.lookup(row.id) is None  # at once where it was deleted
    monkeypatch.setattr(accesskeys, "CACHE_S", 0.0)  # once the period passed, everywhere
    assert other.lookup(row.id) is None
    with pytest.raises(AccessKeyNotFound):
        keys.delete(row.id)
    engine.dispose()


def test_a_nonce_is_used_once_and_forgotten_after_its_window(keys: AccessKeys) -> None:
    later = utcnow() + timedelta(minutes=15)
    assert keys.use_nonce("OEAK1", "n1", later)
    assert not keys.use_nonce("OEAK1", "n1", later)
    assert keys.use_nonce("OEAK2", "n1", later)  # per key
    assert keys.use_nonce("OEAK1", "old", utcnow() - timedelta(seconds=1))
    keys._pruned = float("-inf")
    assert keys.use_nonce("OEAK1", "n2", later)
    with keys._sessions() as s:
        left = sorted(s.scalars(select(NonceRow.key)))
    assert left == ["OEAK1:n1", "OEAK1:n2", "OEAK2:n1"]
