"""OSS credentials from RRSA: the projected ServiceAccount token exchanged with STS
(``AssumeRoleWithOIDC`` against :mod:`testing.sts_server`, whose credentials the OSS
stand-in then accepts), the unmodified ``oss2`` signing with them (V1 and V4), renewal before
expiry, the token file re-read at each exchange, and clear errors that echo no secret."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from processors.storage import rrsa
from processors.storage.errors import PermanentStorageError, TemporaryStorageError
from processors.storage.oss import OssBucket
from processors.storage.uri import OssLocation
from testing.oss_server import OssServer
from testing.sts_server import StsStandIn
from tests.fixtures_oss import BUCKET, MODELS_PREFIX

ROLE = "acs:ram::1234567890:role/openeas-model-reader"
PROVIDER = "acs:ram::1234567890:oidc-provider/ack-rrsa-c0ffee"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.projected-service-account-token.sig"


@pytest.fixture
def sts(oss_server: OssServer) -> Iterator[StsStandIn]:
    server = StsStandIn(ROLE, PROVIDER, TOKEN, oss_server.add_credential).start()
    yield server
    server.stop()


@pytest.fixture
def env(
    sts: StsStandIn, oss_server: OssServer, oss_model_repo: str, tmp_path: Path
) -> dict[str, str]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    return {
        "OSS_ENDPOINT": oss_server.endpoint,
        rrsa.ENV_ROLE_ARN: ROLE,
        rrsa.ENV_PROVIDER_ARN: PROVIDER,
        rrsa.ENV_TOKEN_FILE: str(token_file),
        rrsa.ENV_STS_ENDPOINT: sts.endpoint,
    }


@pytest.mark.parametrize("region", [None, "cn-hangzhou"], ids=["v1", "v4"])
def test_a_pull_lists_the_bucket_with_credentials_from_the_service_account(
    env: dict[str, str], sts: StsStandIn, region: str | None
) -> None:
    if region:
        env = {**env, "OSS_REGION": region}
    bucket = OssBucket(OssLocation(BUCKET, MODELS_PREFIX + "/"), env=env)
    objects, _ = bucket.list_page("")
    assert any(o.key.endswith("config.pbtxt") for o in objects)
    assert len(sts.issued) == 1
    bucket.list_page("")
    assert len(sts.issued) == 1  # reused while valid


def test_credentials_are_renewed_before_they_expire(
    env: dict[str, str], sts: StsStandIn, tmp_path: Path
) -> None:
    now = [1_000.0]
    provider = rrsa.OidcCredentials(env, clock=lambda: now[0])
    first = provider.get_credentials()
    now[0] = first.expires_at - rrsa.REFRESH_MARGIN_S - 1  # still comfortably valid
    assert provider.get_credentials() is first
    # The kubelet rotated the projected token meanwhile: the next exchange reads the new one.
    sts.token = TOKEN + ".rotated"
    Path(env[rrsa.ENV_TOKEN_FILE]).write_text(sts.token)
    now[0] = first.expires_at - rrsa.REFRESH_MARGIN_S + 1  # inside the margin: renewed
    second = provider.get_credentials()
    assert second.access_key_id != first.access_key_id
    assert provider.exchanges == 2 and sts.issued == [first.access_key_id, second.access_key_id]
    assert second.security_token not in repr(second) and second.access_key_secret not in repr(
        second
    )


def test_short_lived_credentials_are_renewed_during_a_long_pull(
    env: dict[str, str], sts: StsStandIn
) -> None:
    sts.lifetime_s = rrsa.REFRESH_MARGIN_S - 1  # always inside the margin: each call renews
    bucket = OssBucket(OssLocation(BUCKET, MODELS_PREFIX + "/"), env=env)
    bucket.list_page("")
    bucket.list_page("")
    assert len(sts.issued) >= 2


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({rrsa.ENV_ROLE_ARN: "acs:ram::1234567890:role/other"}, "EntityNotExist.Role"),
        ({rrsa.ENV_PROVIDER_ARN: "acs:ram::1:oidc-provider/x"}, "EntityNotExist.OIDCProvider"),
    ],
)
def test_a_refused_exchange_says_what_to_check(
    env: dict[str, str], change: dict[str, str], expected: str
) -> None:
    with pytest.raises(PermanentStorageError) as refused:
        rrsa.OidcCredentials({**env, **change}).get_credentials()
    assert expected in str(refused.value) and "trust policy" in str(refused.value)
    assert TOKEN not in str(refused.value)


def test_a_wrong_token_is_refused_without_echoing_it(env: dict[str, str]) -> None:
    Path(env[rrsa.ENV_TOKEN_FILE]).write_text("not-the-token")
    with pytest.raises(PermanentStorageError, match=r"AuthenticationFail\.OIDCToken") as refused:
        rrsa.OidcCredentials(env).get_credentials()
    assert "not-the-token" not in str(refused.value)


def test_a_missing_token_file_and_an_unreachable_sts(env: dict[str, str], tmp_path: Path) -> None:
    missing = {**env, rrsa.ENV_TOKEN_FILE: str(tmp_path / "nope")}
    with pytest.raises(PermanentStorageError, match="ServiceAccount token"):
        rrsa.OidcCredentials(missing).get_credentials()
    away = {**env, rrsa.ENV_STS_ENDPOINT: "http://127.0.0.1:1"}
    with pytest.raises(TemporaryStorageError, match="did not answer"):
        rrsa.OidcCredentials(away).get_credentials()


def test_static_keys_win_and_without_either_the_error_names_both(
    env: dict[str, str], oss_server: OssServer
) -> None:
    assert rrsa.configured(env)
    assert not rrsa.configured({k: v for k, v in env.items() if k != rrsa.ENV_TOKEN_FILE})
    with pytest.raises(PermanentStorageError, match="RRSA ServiceAccount"):
        OssBucket(OssLocation(BUCKET, ""), env={"OSS_ENDPOINT": oss_server.endpoint})
