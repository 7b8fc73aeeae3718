"""``openeas secrets`` against the API stand-in: generated values are made once and never
replaced (a second run, an upgrade, a GitOps sync change nothing), an older chart's values
are carried over, a missing key is added beside kept ones, and no value is ever printed."""

from __future__ import annotations

import base64

import pytest

from controlplane.runtime.kubernetes.client import SecretStore
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.secrets_cli import main
from testing.k8s_server import ApiStandIn

NS = "openeas-serving"  # the stand-in's namespace; the chart runs it in the release's
KEYS = ["admin-token=openeas/admin-token", "postgresql-password=openeas-postgresql/password"]


@pytest.fixture
def api(
    k8s: ApiStandIn, k8s_settings: KubernetesSettings, monkeypatch: pytest.MonkeyPatch
) -> ApiStandIn:
    assert k8s_settings.kubeconfig
    monkeypatch.setenv("OPENEAS_K8S_KUBECONFIG", k8s_settings.kubeconfig)
    return k8s


def run(capsys: pytest.CaptureFixture[str], *keys: str) -> str:
    assert main(["--namespace", NS, "--name", "openeas-generated", *keys]) == 0
    return capsys.readouterr().out


def values(api: ApiStandIn) -> dict[str, str]:
    secret = api.get("secrets", "openeas-generated", NS)
    assert secret is not None
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_made_once_then_kept(api: ApiStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    first_out = run(capsys, *KEYS)
    first = values(api)
    assert set(first) == {"admin-token", "postgresql-password"}
    assert all(len(v) >= 43 and v.isprintable() for v in first.values())
    assert first["admin-token"] != first["postgresql-password"]
    writes = api.write_count()
    again = run(capsys, *KEYS)
    assert values(api) == first and api.write_count() == writes  # nothing rewritten
    assert "added nothing; kept admin-token, postgresql-password" in again
    for value in first.values():
        assert value not in first_out + again


def test_values_an_older_chart_kept_are_carried_over(
    api: ApiStandIn, k8s_settings: KubernetesSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SecretStore(k8s_settings.model_copy(update={"namespace": NS}))
    assert store.create("openeas", {"admin-token": b64("the-old-admin-token")}, {})
    assert store.create("openeas-postgresql", {"password": b64("the-old-password")}, {})
    store.close()
    out = run(capsys, *KEYS)
    assert values(api) == {
        "admin-token": "the-old-admin-token",
        "postgresql-password": "the-old-password",
    }
    assert "the-old" not in out


def test_a_missing_key_is_added_and_the_others_kept(
    api: ApiStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "admin-token")
    token = values(api)["admin-token"]
    out = run(capsys, *KEYS)
    assert values(api)["admin-token"] == token and "postgresql-password" in values(api)
    assert "added postgresql-password; kept admin-token" in out
