"""The audit trail's edges: what is recorded (writes, refusals, crashes, revealed tokens),
what is not (reads, the gateways' calls), filters, retention."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from controlplane.api.app import create_app
from controlplane.settings import Settings
from controlplane.store.audit import AuditTrail, Entry
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.services import Services
from controlplane.store.tables import AuditRow, utcnow
from tests.controlplane.conftest import ADMIN, seed_spec


def _entries(c: TestClient, **query: Any) -> list[dict[str, Any]]:
    answer = c.get("/api/v2/audit", params=query)
    assert answer.status_code == 200, answer.text
    entries: list[dict[str, Any]] = answer.json()["Entries"]
    return entries


def test_what_is_recorded(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(settings.sqlalchemy_url)
    with TestClient(create_app(settings, engine), raise_server_exceptions=False) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN}"
        assert c.post("/api/v2/services", json=seed_spec()).status_code == 200
        assert c.get("/api/v2/services").status_code == 200
        assert c.get("/api/v2/services/local/triton_test").status_code == 200
        assert c.get("/api/v2/services/local/triton_test/token").status_code == 200
        assert c.put("/api/v2/services/local/nope/stop").status_code == 404
        assert c.get("/api/v2/services", headers={"Authorization": "Bearer x"}).status_code == 401

        def crash(*_: Any) -> None:
            raise RuntimeError("boom")

        monkeypatch.setattr(Services, "set_stopped", crash)
        broken = c.put("/api/v2/services/local/triton_test/stop")
        assert broken.status_code == 500
        entries = _entries(c)
        assert [(e["Principal"], e["Action"], e["Resource"], e["Status"]) for e in entries] == [
            ("admin-token", "StopService", "triton_test", 500),
            ("anonymous", "ListServices", "", 401),
            ("admin-token", "StopService", "nope", 404),
            ("admin-token", "DescribeServiceToken", "triton_test", 200),
            ("admin-token", "CreateService", "triton_test", 200),
        ]
        assert entries[0]["RequestId"] == broken.json()["RequestId"]
        assert [e["Action"] for e in _entries(c, service="nope")] == ["StopService"]
        assert len(_entries(c, principal="admin-token", limit=2)) == 2
        assert _entries(c, since=(utcnow() + timedelta(hours=1)).isoformat()) == []
        assert len(_entries(c, since="0")) == 5
        bad = c.get("/api/v2/audit", params={"since": "yesterday"})
        assert (bad.status_code, bad.json()["Code"]) == (422, "InvalidParameter")
        assert "since" in bad.text
    engine.dispose()


def test_entries_past_the_retention_are_deleted(settings: Settings) -> None:
    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_sessions(engine)
    trail = AuditTrail(sessions, retention_days=1)
    with sessions() as s, s.begin():
        s.add(AuditRow(time=utcnow() - timedelta(days=2), principal="old", action="A",
                       resource="", status=200, request_id="r", source_ip=""))  # fmt: skip
    trail.record(Entry("new", "CreateService", "svc", 200, "r2", "127.0.0.1"))
    assert [r.principal for r in trail.entries()] == ["new"]
    engine.dispose()


def test_a_create_and_its_entry_commit_together(settings: Settings) -> None:
    """A create's entry is written by the create's own transaction: one commit stores
    both, and the middleware adds none; a create refused at commit (a name taken) is
    recorded by the middleware with its status, as every refusal is."""
    engine = make_engine(settings.sqlalchemy_url)
    commits: list[int] = []
    event.listen(engine, "commit", lambda _conn: commits.append(1))
    with TestClient(create_app(settings, engine)) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN}"
        commits.clear()
        created = c.post("/api/v2/services", json=seed_spec())
        assert created.status_code == 200 and len(commits) == 1
        assert c.post("/api/v2/services", json=seed_spec()).status_code == 409
        entries = _entries(c)
    assert [(e["Action"], e["Status"]) for e in entries] == [
        ("CreateService", 409),
        ("CreateService", 200),
    ]
    assert entries[1]["RequestId"] == created.headers["x-acs-request-id"]
