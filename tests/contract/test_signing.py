"""contract.signing against the official SDK's own signer (alibabacloud_tea_openapi's
Utils): the same request parts must give the same Authorization, byte for byte."""

from __future__ import annotations

from typing import Any

import pytest
from alibabacloud_tea_openapi.utils import Utils
from darabonba.request import DaraRequest

from contract import signing

SECRET = "s3cr3t-AbC~/+="


def _sdk_request(method: str, path: str, query: dict[str, str], headers: dict[str, str]) -> Any:
    req = DaraRequest()
    req.method = method
    req.pathname = path
    req.query = query
    req.headers = headers
    return req


CASES = [
    ("GET", "/api/v2/services", {}, b""),
    ("GET", "/api/v2/services", {"PageSize": "10", "Label": '{"a":"b c"}', "Filter": ""}, b""),
    ("POST", "/api/v2/services", {"Develop": "true"}, b'{"name":"x"}'),
    ("DELETE", "/api/v2/services/local/my%20svc", {"Keys": "a~b/c*d"}, b""),
    ("PUT", "/api/v2/services/local/s", {"Sort": "CreateTime", "Order": "asc"}, "é".encode()),
]


@pytest.mark.parametrize(("method", "path", "query", "body"), CASES)
def test_acs3_matches_the_sdk_signer(
    method: str, path: str, query: dict[str, str], body: bytes
) -> None:
    ours = signing.acs3_headers(
        "OEAKID", SECRET, method, "127.0.0.1:8080", path, query, body,
        content_type="application/json" if body else "", now=1_800_000_000, nonce="n1",
    )  # fmt: skip
    headers = {k: v for k, v in ours.items() if k != "authorization"}
    sdk = Utils.get_authorization(
        _sdk_request(method, path, query, headers),
        signing.ACS3,
        signing.content_sha256(body),
        "OEAKID",
        SECRET,
    )
    assert ours["authorization"] == sdk


@pytest.mark.parametrize(("method", "path", "query", "body"), CASES)
def test_acs3_verifies_what_the_sdk_signed(
    method: str, path: str, query: dict[str, str], body: bytes
) -> None:
    """The server's side: the SDK's header set (user-agent, accept, x-acs-action... all
    signed) rebuilt from what was received gives the SDK's signature; any change does not."""
    headers = {
        "host": "127.0.0.1:8080",
        "x-acs-version": "2021-07-01",
        "x-acs-action": "ListServices",
        "user-agent": "AlibabaCloud (Linux) TeaDSL/2",
        "x-acs-date": "2027-01-15T08:00:00Z",
        "x-acs-signature-nonce": "abc",
        "accept": "application/json",
        "x-acs-content-sha256": signing.content_sha256(body),
    }
    auth = Utils.get_authorization(
        _sdk_request(method, path, query, headers),
        signing.ACS3,
        headers["x-acs-content-sha256"],
        "OEAKID",
        SECRET,
    )
    parsed = signing.parse_acs3(auth)
    received = {k: [v] for k, v in headers.items()}

    def sign(q: dict[str, str], h: dict[str, list[str]], p: str = path) -> str:
        canonical = signing.acs3_canonical_request(
            method, p, q, h, parsed.signed_headers, headers["x-acs-content-sha256"]
        )
        return signing.acs3_signature(SECRET, canonical)

    assert parsed.access_key_id == "OEAKID"
    assert sign(query, received) == parsed.signature
    assert sign({**query, "PageSize": "99"}, received) != parsed.signature
    assert sign(query, {**received, "x-acs-action": ["DeleteService"]}) != parsed.signature
    assert sign(query, received, path + "x") != parsed.signature


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        ("Bearer x", "scheme"),
        ("ACS3-HMAC-SHA256 Credential=a,SignedHeaders=host", "Signature"),
        ("ACS3-HMAC-SHA256 Credential", "key=value"),
    ],
)
def test_malformed_acs3_headers_say_what_is_wrong(header: str, problem: str) -> None:
    with pytest.raises(signing.SignatureFormatError, match=problem):
        signing.parse_acs3(header)


@pytest.mark.parametrize(
    ("query", "content_type"),
    [({}, ""), ({"PageSize": "5", "Filter": "", "Label": '{"k":"v"}'}, "application/json")],
)
def test_roa_matches_the_sdk_signer(query: dict[str, str], content_type: str) -> None:
    headers = {
        "date": "Thu, 06 Feb 2020 07:32:54 GMT",
        "host": "127.0.0.1:8080",
        "accept": "application/json",
        "x-acs-signature-nonce": "n",
        "x-acs-signature-method": "HMAC-SHA1",
        "x-acs-signature-version": "1.0",
        "x-acs-version": "2021-07-01",
        "x-acs-action": "ListServices",
        "user-agent": "ua",
    }
    if content_type:
        headers["content-type"] = content_type
    sdk_sts = Utils.get_string_to_sign(_sdk_request("GET", "/api/v2/services", query, headers))
    ours = signing.roa_string_to_sign("GET", "/api/v2/services", query, headers)
    assert ours == sdk_sts
    sdk_sig = Utils.get_roasignature(sdk_sts, SECRET)
    assert signing.roa_signature(SECRET, ours) == sdk_sig
    assert signing.parse_roa(f"acs OEAKID:{sdk_sig}") == ("OEAKID", sdk_sig)
