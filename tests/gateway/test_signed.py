"""EAS-signed predict calls through the real gateway, made by the unmodified
``eas_prediction.PredictClient`` in its default (signing) mode over real HTTP: the service
name carries the replica path (``svc/v2/models/<m>/infer``), a body still arriving is
checked before any of it reaches the replica, groups take a signature by their token or a
member's, and each refusal is a 401 naming what was wrong."""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import re
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest
from eas_prediction import PredictClient, StringRequest, predict_client
from eas_prediction.exception import PredictException

from contract.wire import GroupRoute, RouteTable, token_digest
from testing.waiting import wait_until
from tests.fixtures_triton import TritonServer, _inception
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import SERVICE, TOKEN, Echo, Gateway, LoopThread, route, table
from tests.gateway.test_mirror import Replica, mirrored, replica

MODEL_PATH = "v2/models/add_sub/infer"
JSON_BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
)
GROUP = "g"
GROUP_TOKEN = "group-token-" + "g" * 20
OTHER_TOKEN = "other-token-" + "o" * 20


@pytest.fixture
def gw(make_gateway: GatewayFactory, echo: Echo) -> Gateway:
    member = route([echo.url]).model_copy(update={"group": GROUP, "grouping": True})
    group = GroupRoute(
        group=GROUP, token_sha256=token_digest(GROUP_TOKEN), token=GROUP_TOKEN, traffic_mode="auto"
    )
    return make_gateway(RouteTable(version=1, routes=[member], groups=[group]))


def inception_predict(image: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The example model's own numbers for ``image``."""
    out: np.ndarray[Any, Any] = _inception().predict(image)
    return out


def sdk(gw: Gateway, service: str, token: str = TOKEN) -> PredictClient:
    client = PredictClient(gw.hostport, service)  # the SDK's default: it signs
    client.set_token(token)
    client.set_retry_count(1)
    client.init()
    return client


@pytest.fixture
def clients() -> Iterator[list[PredictClient]]:
    made: list[PredictClient] = []
    yield made
    for c in made:
        c.destroy()


def predict(
    gw: Gateway, service: str, body: str | bytes, token: str = TOKEN, **headers: str
) -> dict[str, Any]:
    client = sdk(gw, service, token)
    try:
        if headers:
            client.add_extra_headers(headers)
        answer: Any = client.predict(StringRequest(body)).response_data
        doc: dict[str, Any] = json.loads(answer)
        return doc
    finally:
        client.destroy()


def refusal(gw: Gateway, service: str, body: str | bytes, token: str = TOKEN) -> str:
    """The detail of the 401 the SDK gets."""
    with pytest.raises(PredictException) as e:
        predict(gw, service, body, token)
    assert e.value.code == 401, e.value
    doc: dict[str, Any] = json.loads(e.value.message)
    assert doc["status"] == 401 and doc["error"] == doc["detail"]
    detail: str = doc["detail"]
    return detail


def signed_headers(service: str, body: bytes, token: str = TOKEN) -> dict[str, str]:
    """What the SDK sends with ``body`` (its own signing code), to send by hand."""
    client = PredictClient("127.0.0.1:1", service)
    client.set_token(token)
    made: dict[str, str] = client.generate_singaure(bytearray(body))
    return made


def post(
    gw: Gateway, path: str, body: bytes | Iterator[bytes], headers: dict[str, str]
) -> tuple[int, http.client.HTTPMessage, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=20)
    try:
        chunked = not isinstance(body, bytes)
        # Its length as sent (http.client's), not the one the SDK computed for its body.
        headers = {k: v for k, v in headers.items() if k != "Content-Length"}
        conn.request("POST", path, body=body, headers=headers, encode_chunked=chunked)
        resp = conn.getresponse()
        return resp.status, resp.msg, resp.read()
    finally:
        conn.close()


def test_the_sdk_reaches_the_replica_path_its_service_name_carries(gw: Gateway, echo: Echo) -> None:
    doc = predict(gw, f"{SERVICE}/{MODEL_PATH}", JSON_BODY)
    assert doc["method"] == "POST" and doc["path_qs"] == f"/{MODEL_PATH}"
    assert doc["body_sha256"] == hashlib.sha256(JSON_BODY.encode()).hexdigest()
    [seen] = echo.seen
    assert "authorization" not in seen.names()  # the signature stays at the gateway
    # A binary body (Triton's binary tensors) and a query string, signed as sent.
    raw = bytes(range(256)) * 16
    doc = predict(
        gw, f"{SERVICE}/{MODEL_PATH}?x=1", raw, **{"Inference-Header-Content-Length": "0"}
    )
    assert doc["path_qs"] == f"/{MODEL_PATH}?x=1"
    assert doc["body_sha256"] == hashlib.sha256(raw).hexdigest()


def test_the_token_itself_still_opens(gw: Gateway) -> None:
    client = PredictClient(gw.hostport, SERVICE, custom_url=f"{gw.url}/api/predict/{SERVICE}/v2")
    client.set_token(TOKEN)  # custom_url mode: the raw token
    client.init()
    try:
        assert json.loads(client.predict(StringRequest("{}")).response_data)["path_qs"] == "/v2"
    finally:
        client.destroy()
    for auth in (TOKEN, f"Bearer {TOKEN}"):
        status, _, _ = post(gw, f"/api/predict/{SERVICE}/v2", b"{}", {"Authorization": auth})
        assert status == 200


def test_a_large_signed_body_is_checked_before_any_of_it_goes_on(gw: Gateway, echo: Echo) -> None:
    """Over the whole-body buffer the gateway would stream: a signed one is read whole,
    checked, then sent; a tampered one never reaches the replica."""
    big = bytes(range(256)) * 4096  # 1 MiB
    path = f"{SERVICE}/{MODEL_PATH}"
    doc = predict(gw, path, big)
    assert doc["body_len"] == len(big) and doc["body_sha256"] == hashlib.sha256(big).hexdigest()
    echo.seen.clear()
    headers = signed_headers(path, big)
    tampered = big[:-1] + b"\x00"
    status, msg, body = post(gw, f"/api/predict/{path}", tampered, headers)
    assert status == 401 and "Content-MD5" in json.loads(body)["detail"]
    assert msg["WWW-Authenticate"].startswith("Bearer")
    # Chunked (no length): read whole as well.
    status, _, body = post(gw, f"/api/predict/{path}", iter([big[:1000], big[1000:]]), headers)
    assert status == 200 and json.loads(body)["body_len"] == len(big)
    status, _, body = post(gw, f"/api/predict/{path}", iter([tampered]), headers)
    assert status == 401 and "Content-MD5" in json.loads(body)["detail"]
    assert len(echo.seen) == 1  # only the good chunked one


def test_refusals_name_what_was_wrong(
    gw: Gateway, echo: Echo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = f"{SERVICE}/{MODEL_PATH}"
    assert "signature does not match" in refusal(gw, path, JSON_BODY, OTHER_TOKEN)
    # A tampered body, header or path, each sent with the SDK's headers for the original.
    headers = signed_headers(path, JSON_BODY.encode())
    signature = headers["Authorization"][4:]
    for changed_path, body, extra, says in [
        (path, JSON_BODY.encode() + b" ", {}, "Content-MD5"),
        (path, JSON_BODY.encode(), {"Content-Type": "text/plain"}, "signature does not match"),
        (f"{SERVICE}/v2/models/other/infer", JSON_BODY.encode(), {}, "signature does not match"),
        (path, JSON_BODY.encode(), {"Content-MD5": "0" * 32}, "signature does not match"),
        (path, JSON_BODY.encode(), {"Content-MD5": ""}, "Content-MD5"),
    ]:
        status, _, answer = post(gw, f"/api/predict/{changed_path}", body, headers | extra)
        assert status == 401 and says in json.loads(answer)["detail"], (changed_path, extra)
    no_md5 = {k: v for k, v in headers.items() if k != "Content-MD5"}
    status, _, answer = post(gw, f"/api/predict/{path}", JSON_BODY.encode(), no_md5)
    assert status == 401 and "needs a Content-MD5" in json.loads(answer)["detail"]

    # A clock 16 minutes off: the SDK's own code signs, with its clock moved.
    class Skewed:
        class datetime:
            @staticmethod
            def now() -> datetime:
                return datetime.now() - timedelta(minutes=16)

    monkeypatch.setattr(predict_client, "datetime", Skewed)
    detail = refusal(gw, path, JSON_BODY)
    assert re.search(r"the Date header \(.* GMT\) is 96[01] s behind", detail), detail
    assert echo.seen == []
    assert signature not in caplog.text and TOKEN not in caplog.text


def test_a_group_takes_a_signature_by_its_token_or_a_members(gw: Gateway) -> None:
    assert predict(gw, f"{GROUP}/{MODEL_PATH}", JSON_BODY, GROUP_TOKEN)["path_qs"] == (
        f"/{MODEL_PATH}"
    )
    assert predict(gw, f"{GROUP}/{MODEL_PATH}", JSON_BODY, TOKEN)["method"] == "POST"
    assert predict(gw, f"{GROUP}.{SERVICE}/{MODEL_PATH}", JSON_BODY, GROUP_TOKEN)
    assert predict(gw, f"{GROUP}.{SERVICE}/{MODEL_PATH}", JSON_BODY, TOKEN)
    assert "signature does not match" in refusal(gw, f"{GROUP}/v2", "{}", OTHER_TOKEN)
    assert "signature does not match" in refusal(gw, f"{GROUP}.{SERVICE}/v2", "{}", OTHER_TOKEN)
    # The group's signature checks its body too.
    headers = signed_headers(f"{GROUP}/v2", b"{}", GROUP_TOKEN)
    status, _, answer = post(gw, f"/api/predict/{GROUP}/v2", b"[]", headers)
    assert status == 401 and "Content-MD5" in json.loads(answer)["detail"]


def test_without_its_key_a_signed_call_is_refused_and_the_token_still_opens(
    make_gateway: GatewayFactory, echo: Echo
) -> None:
    """A route from a control plane that predates signed calls, or a snapshot, carries no
    token: signatures cannot be checked."""
    keyless = make_gateway(table(route([echo.url]).model_copy(update={"token": None})))
    assert "cannot check signed calls" in refusal(keyless, f"{SERVICE}/v2", "{}")
    status, _, _ = post(keyless, f"/api/predict/{SERVICE}/v2", b"{}", {"Authorization": TOKEN})
    assert status == 200


def test_a_mirrored_service_gets_and_copies_only_a_checked_body(
    make_gateway: GatewayFactory, lt: LoopThread
) -> None:
    """A mirror copies a signed call once its body is checked: a tampered one reaches
    neither the primary nor its shadow."""
    pool: list[Replica] = []
    try:
        primary, shadow = replica(pool, lt), replica(pool, lt)
        gw = make_gateway(mirrored(primary, {"shadow": [shadow.url]}))
        body = JSON_BODY.encode()
        path = "primary/v2/models/m/infer"
        headers = signed_headers(path, body)
        status, _, _ = post(gw, f"/api/predict/{path}", body, headers)
        assert status == 200
        wait_until(lambda: len(shadow.bodies) == 1, 10)
        assert primary.bodies == [body] and shadow.bodies == [body]
        status, _, answer = post(gw, f"/api/predict/{path}", body[::-1], headers)
        assert status == 401 and "Content-MD5" in json.loads(answer)["detail"]
        time.sleep(0.2)
        assert len(primary.bodies) == 1 and len(shadow.bodies) == 1
    finally:
        for r in pool:
            r.close()


# -- to real Triton ------------------------------------------------------------------------


@pytest.mark.slow
def test_the_sdk_signs_its_way_to_real_triton(
    make_gateway: GatewayFactory, triton_server: TritonServer
) -> None:
    """``PredictClient`` in its default mode, the Triton path in its service name: a JSON
    body (add_sub) and a 1 MB binary-tensor body (inception_graphdef, over the whole-body
    buffer: read whole and checked before it goes on), to a service and to its group."""
    member = route([triton_server.base_url]).model_copy(update={"group": GROUP, "grouping": True})
    group = GroupRoute(
        group=GROUP, token_sha256=token_digest(GROUP_TOKEN), token=GROUP_TOKEN, traffic_mode="auto"
    )
    gw = make_gateway(RouteTable(version=1, routes=[member], groups=[group]))
    a, b = [1.5, 2.0, -3.0, 4.25], [0.5, -1.0, 2.0, 8.0]
    add_sub = json.dumps(
        {
            "inputs": [
                {"name": name, "shape": [4], "datatype": "FP32", "data": data}
                for name, data in (("INPUT0", a), ("INPUT1", b))
            ]
        }
    )
    image = np.random.default_rng(5).random((1, 299, 299, 3), dtype=np.float32)
    softmax = "InceptionV3/Predictions/Softmax"
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 299, 299, 3],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": image.nbytes},
                }
            ],
            "outputs": [{"name": softmax, "parameters": {"binary_data": False}}],
        }
    ).encode()
    binary = {"Inference-Header-Content-Length": str(len(header))}
    for name, token in ((SERVICE, TOKEN), (GROUP, GROUP_TOKEN), (GROUP, TOKEN)):
        doc = predict(gw, f"{name}/v2/models/add_sub/infer", add_sub, token)
        outputs = {o["name"]: o["data"] for o in doc["outputs"]}
        np.testing.assert_array_equal(outputs["OUTPUT0"], np.add(a, b, dtype=np.float32))
        np.testing.assert_array_equal(outputs["OUTPUT1"], np.subtract(a, b, dtype=np.float32))

        doc = predict(gw, f"{name}/v2/models/inception_graphdef/infer", header + image.tobytes(),
                      token, **binary)  # fmt: skip
        [out] = doc["outputs"]
        assert out["name"] == softmax and out["shape"] == [1, 1001]
        want = inception_predict(image)
        np.testing.assert_allclose(np.array(out["data"], dtype=np.float32), want.ravel(), rtol=1e-6)
    tampered = header + (image + 1).tobytes()
    headers = signed_headers(
        f"{SERVICE}/v2/models/inception_graphdef/infer", header + image.tobytes()
    )
    status, _, answer = post(
        gw, f"/api/predict/{SERVICE}/v2/models/inception_graphdef/infer", tampered, headers | binary
    )
    assert status == 401 and "Content-MD5" in json.loads(answer)["detail"]


def test_a_small_body_in_pieces_is_checked_whole(gw: Gateway, echo: Echo) -> None:
    """A body under the whole-body buffer that arrives in several reads (buffered as
    several chunks) is checked as the one body they make."""
    path = f"/api/predict/{SERVICE}/v2"
    body = JSON_BODY.encode()
    signed = signed_headers(f"{SERVICE}/v2", body)
    head = "".join(f"{k}: {v}\r\n" for k, v in signed.items())
    for last, status in ((body[20:], 200), (body[20:][::-1], 401)):
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
            time.sleep(0.05)
            s.sendall(body[:20])
            time.sleep(0.05)
            s.sendall(last)
            answer = s.recv(65536)
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert [seen.body for seen in echo.seen] == [body]
