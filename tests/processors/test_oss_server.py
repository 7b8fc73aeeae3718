"""The OSS stand-in is strict where OSS is: signatures (V1, V4, STS), error format, ACLs,
ranges, listing pages. If it accepted what OSS rejects, the pull tests would prove nothing."""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import oss2
import pytest
import requests

from testing.oss_server import OssServer
from tests.fixtures_oss import (
    ACCESS_KEY_ID,
    ACCESS_KEY_SECRET,
    BUCKET,
    STS_KEY_ID,
    STS_KEY_SECRET,
    STS_TOKEN,
    oss_bucket,
)

Errors = oss2.exceptions


@pytest.fixture
def key(oss_server: OssServer) -> str:
    oss_server.reset()
    name = f"strict-{uuid.uuid4().hex[:8]}/hello world ü.txt"
    oss_bucket(oss_server).put_object(name, b"0123456789")
    return name


def bucket_with(
    server: OssServer, auth: object, name: str = BUCKET, region: str | None = None
) -> oss2.Bucket:
    return oss2.Bucket(auth, server.endpoint, name, region=region)


def test_v1_v4_and_sts_signatures_are_accepted(oss_server: OssServer, key: str) -> None:
    region = oss_server.region
    for auth, signing_region in [
        (oss2.Auth(ACCESS_KEY_ID, ACCESS_KEY_SECRET), None),
        (oss2.AuthV4(ACCESS_KEY_ID, ACCESS_KEY_SECRET), region),
        (oss2.StsAuth(STS_KEY_ID, STS_KEY_SECRET, STS_TOKEN), None),
        (oss2.StsAuth(STS_KEY_ID, STS_KEY_SECRET, STS_TOKEN, auth_version="v4"), region),
    ]:
        client = bucket_with(oss_server, auth, region=signing_region)
        assert client.get_object(key).read() == b"0123456789"
        assert client.head_object(key).content_length == 10
        page = client.list_objects_v2(prefix=key.split("/")[0] + "/", continuation_token="")
        assert [o.key for o in page.object_list] == [key]


@pytest.mark.parametrize(
    ("auth", "region", "code"),
    [
        (oss2.Auth(ACCESS_KEY_ID, "wrong"), None, "SignatureDoesNotMatch"),
        (oss2.AuthV4(ACCESS_KEY_ID, "wrong"), "cn-hangzhou", "SignatureDoesNotMatch"),
        (oss2.AuthV4(ACCESS_KEY_ID, ACCESS_KEY_SECRET), "us-west-1", "SignatureDoesNotMatch"),
        (oss2.Auth("LTAI-nobody", "x"), None, "InvalidAccessKeyId"),
        (oss2.Auth(STS_KEY_ID, STS_KEY_SECRET), None, "InvalidAccessKeyId"),  # token missing
        (oss2.StsAuth(STS_KEY_ID, STS_KEY_SECRET, "other"), None, "InvalidAccessKeyId"),
        (oss2.AnonymousAuth(), None, "AccessDenied"),  # private bucket
    ],
)
def test_bad_credentials_are_rejected(
    oss_server: OssServer, key: str, auth: object, region: str | None, code: str
) -> None:
    client = bucket_with(oss_server, auth, region=region)
    calls: list[Callable[[], object]] = [
        lambda: client.get_object(key),
        lambda: client.list_objects_v2(),
    ]
    for call in calls:
        with pytest.raises(Errors.ServerError) as caught:
            call()
        assert (caught.value.status, caught.value.code) == (403, code)


def test_error_xml_is_formatted_as_oss_does(oss_server: OssServer, key: str) -> None:
    client = bucket_with(oss_server, oss2.Auth(ACCESS_KEY_ID, "wrong"))
    with pytest.raises(Errors.SignatureDoesNotMatch) as caught:
        client.get_object(key)
    e = caught.value
    root = ElementTree.fromstring(e.body)
    assert [c.tag for c in root][:4] == ["Code", "Message", "RequestId", "HostId"]
    assert e.details["RequestId"] == e.request_id and len(e.request_id) == 24
    assert e.details["OSSAccessKeyId"] == ACCESS_KEY_ID
    assert e.details["StringToSign"].startswith("GET\n")  # lets a user diff their own
    assert e.headers["Content-Type"] == "application/xml"


def test_head_errors_travel_in_x_oss_err(oss_server: OssServer, key: str) -> None:
    with pytest.raises(Errors.NoSuchKey) as caught:
        oss_bucket(oss_server).head_object(key + ".missing")
    e = caught.value
    assert e.body == b""
    xml = base64.b64decode(e.headers["x-oss-err"])
    assert ElementTree.fromstring(xml).findtext("Code") == "NoSuchKey"
    assert e.details["Key"] == key + ".missing" and e.request_id
    with pytest.raises(Errors.NoSuchBucket):
        oss_bucket(oss_server, "no-such-bucket").head_object(key)


def test_a_tampered_request_fails(oss_server: OssServer, key: str) -> None:
    """A signature is bound to method, resource and x-oss-* headers, not just to the key."""
    auth = oss2.Auth(ACCESS_KEY_ID, ACCESS_KEY_SECRET)
    url = f"{oss_server.endpoint}/{BUCKET}/{quote(key, safe='')}"
    signed = oss2.http.Request("GET", url)
    auth._sign_request(signed, BUCKET, key)
    headers = dict(signed.headers)
    headers.pop("Accept-Encoding")
    assert requests.get(url, headers=headers).status_code == 200
    assert requests.get(url + "x", headers=headers).status_code == 403
    assert requests.head(url, headers=headers).status_code == 403
    assert requests.get(url, headers={**headers, "x-oss-meta-a": "1"}).status_code == 403
    assert (
        requests.get(url, headers={**headers, "Date": "Mon, 01 Jan 2001 00:00:00 GMT"}).status_code
        == 403
    )
    resp = requests.get(url, params={"acl": ""}, headers=headers)  # a sub-resource is signed
    assert resp.status_code == 403


def test_clock_skew_is_refused(
    oss_server: OssServer, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        oss2.utils, "http_date", lambda timeval=None: "Mon, 01 Jan 2001 00:00:00 GMT"
    )
    with pytest.raises(Errors.ServerError) as caught:
        oss_bucket(oss_server).get_object(key)
    assert (caught.value.status, caught.value.code) == (403, "RequestTimeTooSkewed")


def test_bucket_acl(oss_server: OssServer) -> None:
    name = f"acl-{uuid.uuid4().hex[:6]}"
    oss_server.create_bucket(name, acl="public-read", grants={ACCESS_KEY_ID: "read-write"})
    owner = oss_bucket(oss_server, name)
    owner.put_object("k", b"v")
    sts = bucket_with(oss_server, oss2.StsAuth(STS_KEY_ID, STS_KEY_SECRET, STS_TOKEN), name)
    with pytest.raises(Errors.AccessDenied):
        sts.get_object("k")
    oss_server.set_grants(name, {ACCESS_KEY_ID: "read-write", STS_KEY_ID: "read"})
    assert sts.get_object("k").read() == b"v"
    with pytest.raises(Errors.AccessDenied):
        sts.put_object("k", b"w")
    assert bucket_with(oss_server, oss2.AnonymousAuth(), name).get_object("k").read() == b"v"


def test_ranges_crc_and_conditions(oss_server: OssServer, key: str) -> None:
    client = oss_bucket(oss_server)
    whole = client.get_object(key)
    crc = whole.server_crc
    assert (whole.status, whole.read()) == (200, b"0123456789") and crc is not None
    assert whole.headers["ETag"] == '"781E5E245D69B566979B86E28D23F2C7"'  # MD5, upper-case
    assert "GMT" in whole.headers["Last-Modified"]
    part = client.get_object(key, byte_range=(2, 4))
    assert (part.status, part.read(), part.content_range) == (206, b"234", "bytes 2-4/10")
    assert part.server_crc == crc  # OSS sends the whole object's CRC on ranged reads
    assert client.get_object(key, byte_range=(None, 3)).read() == b"789"
    assert client.get_object(key, byte_range=(7, None)).read() == b"789"
    ignored = client.get_object(key, byte_range=(20, 30))  # OSS's default: whole object
    assert (ignored.status, ignored.read()) == (200, b"0123456789")
    with pytest.raises(Errors.ServerError) as caught:
        client.get_object(key, byte_range=(20, 30), headers={"x-oss-range-behavior": "standard"})
    assert caught.value.status == 416
    with pytest.raises(Errors.PreconditionFailed):
        client.get_object(key, headers={"If-Match": '"0000"'})
    with pytest.raises(Errors.NotModified):
        client.get_object(key, headers={"If-None-Match": whole.headers["ETag"]})


def test_put_checks_content_md5_and_returns_crc(oss_server: OssServer) -> None:
    client = oss_bucket(oss_server)
    result = client.put_object("md5/k", b"abc")  # oss2 compares the returned CRC itself
    expected = oss2.utils.Crc64()
    expected.update(b"abc")
    assert result.crc == expected.crc
    with pytest.raises(Errors.InvalidDigest):
        client.put_object("md5/k", b"abc", headers={"Content-MD5": "AAAAAAAAAAAAAAAAAAAAAA=="})
    assert client.get_object("md5/k").read() == b"abc"


def test_list_v2_pages_with_tokens_and_prefixes(oss_server: OssServer) -> None:
    client = oss_bucket(oss_server)
    base = f"page-{uuid.uuid4().hex[:6]}/"
    keys = [f"{base}{i:02d} ü+&%.bin" for i in range(23)] + [f"{base}dir/{i}" for i in range(3)]
    for k in keys:
        client.put_object(k, b"x")

    pages: list[Any] = []
    token: str | None = ""
    while token is not None:
        page = client.list_objects_v2(prefix=base, continuation_token=token, max_keys=10)
        pages.append(page)
        token = page.next_continuation_token if page.is_truncated else None
    assert [len(p.object_list) for p in pages] == [10, 10, 6]
    assert [o.key for p in pages for o in p.object_list] == sorted(keys)

    folded = client.list_objects_v2(prefix=base, delimiter="/", max_keys=22)
    assert (len(folded.object_list), folded.prefix_list, folded.is_truncated) == (22, [], True)
    rest = client.list_objects_v2(
        prefix=base, delimiter="/", continuation_token=folded.next_continuation_token
    )
    assert [o.key for o in rest.object_list] == [keys[22]] and not rest.is_truncated
    assert rest.prefix_list == [f"{base}dir/"]  # three keys, one entry
    assert [o.key for o in oss2.ObjectIterator(client, prefix=base, max_keys=7)] == sorted(keys)
    raw = ElementTree.fromstring(requests.Session().send(_signed_list(oss_server, base)).content)
    assert raw.findtext("KeyCount") == "5" and raw.findtext("IsTruncated") == "true"
    with pytest.raises(Errors.InvalidArgument):
        client.list_objects_v2(max_keys=1001)


def _signed_list(server: OssServer, prefix: str) -> requests.PreparedRequest:
    params = {"list-type": "2", "prefix": prefix, "max-keys": "5"}
    url = f"{server.endpoint}/{BUCKET}/"
    signed = oss2.http.Request("GET", url, params=params)
    oss2.Auth(ACCESS_KEY_ID, ACCESS_KEY_SECRET)._sign_request(signed, BUCKET, "")
    headers = {k: v for k, v in signed.headers.items() if v is not None}
    return requests.Request("GET", url, params=params, headers=headers).prepare()


def test_fault_knobs_and_counters(oss_server: OssServer, key: str) -> None:
    client = oss_bucket(oss_server)
    oss_server.fail_next(1, status=503)
    with pytest.raises(Errors.ServerError) as caught:
        client.get_object(key)
    assert (caught.value.status, caught.value.code) == (503, "ServiceUnavailable")
    oss_server.drop_next(1, after=3)
    with pytest.raises(requests.RequestException):
        client.get_object(key).read()
    oss_server.corrupt_next(1)
    assert client.get_object(key).read() == b"\xcf123456789"
    assert client.get_object(key).read() == b"0123456789"
    assert oss_server.requests_for(key) == 4
    assert oss_server.bytes_served(key) == 3 + 10 + 10


def test_first_byte_latency_delays_each_answer(
    oss_server: OssServer, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmarks' OSS first-byte latency: each request waits, concurrent ones overlap."""
    client = oss_bucket(oss_server)
    monkeypatch.setattr(oss_server, "first_byte_s", 0.2)
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        bodies = list(pool.map(lambda _: client.get_object(key).read(), range(4)))
    took = time.monotonic() - started
    assert bodies == [b"0123456789"] * 4 and 0.2 <= took < 0.8


def test_multipart_etags_and_a_replacement_between_reads(oss_server: OssServer) -> None:
    client = oss_bucket(oss_server)
    name = f"mp/{uuid.uuid4().hex[:6]}"
    data = bytes(range(256)) * 40
    etag = oss_server.put(BUCKET, name, data, parts=2)
    md5 = [hashlib.md5(data[:5120]).digest(), hashlib.md5(data[5120:]).digest()]
    assert etag == hashlib.md5(b"".join(md5)).hexdigest().upper() + "-2"
    got = client.get_object(name)
    assert got.read() == data and got.headers["ETag"] == f'"{etag}"'
    assert got.headers["x-oss-object-type"] == "Multipart"
    [listed] = client.list_objects_v2(prefix=name).object_list
    assert (listed.etag, listed.type) == (etag, "Multipart")

    # Another writer replaces it just before the next read: the read's If-Match fails.
    oss_server.before_next(lambda: oss_server.put(BUCKET, name, b"new"))
    with pytest.raises(Errors.PreconditionFailed):
        client.get_object(name, byte_range=(0, 9), headers={"If-Match": f'"{etag}"'})
    assert client.get_object(name, headers={"If-Match": "*"}).read() == b"new"
