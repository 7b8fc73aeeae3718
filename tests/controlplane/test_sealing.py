"""Tokens at rest: sealed in the database, opened only by the explicit admin calls, sealed by
``openeas migrate`` when stored in clear, and re-sealed on a key rotation."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from controlplane import cli
from controlplane.settings import Settings
from controlplane.store import sealing
from controlplane.store.db import make_engine
from controlplane.store.sealing import SealError, TokenSealer
from tests.controlplane.conftest import seed_spec

TOKEN = "my-custom-service-token-0123456789"


def test_seal_open_and_rotate() -> None:
    old = TokenSealer(["old-key-0123456789abcdef"])
    sealed = old.seal(TOKEN)
    assert sealed.startswith(sealing.PREFIX) and TOKEN not in sealed
    assert old.open(sealed) == TOKEN and old.open(TOKEN) == TOKEN  # clear values pass
    rotating = TokenSealer(["new-key-0123456789abcdef", "old-key-0123456789abcdef"])
    assert rotating.open(sealed) == TOKEN
    resealed = rotating.reseal(sealed)
    assert TokenSealer(["new-key-0123456789abcdef"]).open(resealed) == TOKEN
    with pytest.raises(SealError, match="OPENEAS_SECRET_KEY"):
        old.open(resealed)
    with pytest.raises(ValueError, match="at least 16"):
        TokenSealer(["short"])


def test_without_a_key_one_is_made_once_in_the_data_dir(tmp_path: Path) -> None:
    first = sealing.from_settings("", tmp_path)
    key = tmp_path / sealing.KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert sealing.from_settings("", tmp_path).open(first.seal(TOKEN)) == TOKEN


def test_the_database_never_holds_a_token_in_clear(client: TestClient, settings: Settings) -> None:
    spec = seed_spec(token=TOKEN, metadata={"group": "g"})
    assert client.post("/api/v2/services", json=spec).status_code == 200
    group_token = client.get("/api/v2/groups/local/g/token").json()["Token"]
    rotated = client.post("/api/v2/services/local/triton_test/token").json()["Token"]
    assert client.get("/api/v2/services/local/triton_test/token").json()["Token"] == rotated
    engine = make_engine(settings.sqlalchemy_url)
    with engine.connect() as conn:
        dump = " ".join(
            str(row)
            for table in ("services", "service_groups", "service_events")
            for row in conn.execute(text(f"SELECT * FROM {table}"))
        )
    engine.dispose()
    assert "sealed:" in dump
    for secret in (TOKEN, rotated, group_token):
        assert secret not in dump
    if settings.sqlalchemy_url.startswith("sqlite"):  # the file itself, WAL included
        raw = b"".join(p.read_bytes() for p in settings.data_dir.glob("openeas.db*"))
        for secret in (TOKEN, rotated, group_token):
            assert secret.encode() not in raw


def test_migrate_seals_tokens_stored_in_clear_and_reseals_on_rotation(
    client: TestClient, settings: Settings
) -> None:
    assert client.post("/api/v2/services", json=seed_spec(token=TOKEN)).status_code == 200
    engine = make_engine(settings.sqlalchemy_url)
    with engine.begin() as conn:  # as a database from before sealing holds it
        conn.execute(text("UPDATE services SET token = :t"), {"t": TOKEN})
    assert client.get("/api/v2/services/local/triton_test/token").json()["Token"] == TOKEN
    assert cli.upgrade(settings) == 1
    assert cli.upgrade(settings) == 0  # nothing left in clear
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT token FROM services")).scalar_one()
    assert stored.startswith(sealing.PREFIX)

    key = (settings.data_dir / sealing.KEY_FILE).read_text().strip()
    rotated = settings.model_copy(update={"secret_key": f"a-brand-new-key-0123456789,{key}"})
    assert cli.upgrade(rotated, reseal=True) == 1
    with engine.connect() as conn:
        resealed = conn.execute(text("SELECT token FROM services")).scalar_one()
    engine.dispose()
    assert TokenSealer(["a-brand-new-key-0123456789"]).open(resealed) == TOKEN
