"""``eascmd accesskey``, ``eascmd config -i`` (requests signed with the pair) and
``eascmd audit`` against a live control plane over HTTP (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.controlplane.conftest import ADMIN, LiveServer, seed_spec
from tests.controlplane.test_eascmd_cli import eascmd  # noqa: F401  (fixture)


def _field(out: str, name: str) -> str:
    found = re.search(rf"\| {name}\s+\| (\S+)", out)
    assert found, out
    return found.group(1)


def test_a_developer_key_signs_eascmd_within_its_globs(
    eascmd: Any,  # noqa: F811
    live_api: LiveServer,
    tmp_path: Path,
) -> None:
    code, out, _ = eascmd("accesskey", "create", "--role", "developer", "--services", "team_a_*")
    assert code == 0 and "shown this once" in out
    key_id, secret = _field(out, "AccessKeyId"), _field(out, "AccessKeySecret")
    code, out, _ = eascmd("accesskey", "list")
    assert key_id in out and "team_a_*" in out and secret not in out

    assert eascmd("config", "-e", live_api.url, "-i", key_id, "-k", secret)[0] == 0
    stored = json.loads((tmp_path / "home" / ".eascmd" / "config").read_text())
    assert stored["access_key_id"] == key_id
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(seed_spec(name="team_a_svc")))
    code, out, err = eascmd("create", str(mine), "--no-wait")
    assert code == 0, err
    assert eascmd("list")[1].count("team_a_svc") == 1  # a signed GET with a query
    theirs = tmp_path / "theirs.json"
    theirs.write_text(json.dumps(seed_spec(name="team_b_svc")))
    code, _, err = eascmd("create", str(theirs), "--no-wait")
    assert code == 1 and "[Forbidden]" not in err and "Forbidden" in err
    assert "team_b_svc" in err
    code, _, err = eascmd("accesskey", "list")
    assert code == 1 and "admin role" in err

    assert eascmd("config", "-e", live_api.url, "-i", key_id, "-k", "wrong-secret")[0] == 0
    code, _, err = eascmd("list")
    assert code == 1 and "[SignatureDoesNotMatch]" in err and "wrong-secret" not in err

    assert eascmd("config", "-e", live_api.url, "-k", ADMIN)[0] == 0
    code, out, _ = eascmd("audit", "--principal", key_id)
    lines = [line for line in out.splitlines() if key_id in line]
    assert len(lines) == 4, out  # the create, the refused create, list keys, bad signature
    assert any("CreateService" in line and "team_a_svc" in line and "200" in line for line in lines)
    assert any("CreateService" in line and "team_b_svc" in line and "403" in line for line in lines)
    code, out, _ = eascmd("audit", "--service", "team_a_svc")
    assert code == 0 and "CreateService" in out

    assert eascmd("accesskey", "delete", key_id) == (0, f"[OK] AccessKey {key_id} is revoked\n", "")
    code, _, err = eascmd("accesskey", "delete", key_id)
    assert code == 1 and "InvalidAccessKeyId.NotFound" in err
    assert eascmd("config", "-e", live_api.url, "-i", key_id, "-k", secret)[0] == 0
    code, _, err = eascmd("list")
    assert code == 1 and "InvalidAccessKeyId.NotFound" in err
