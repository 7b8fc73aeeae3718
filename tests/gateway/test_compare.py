"""Comparing a shadow's answer with the primary's, as a table: byte-equal, then Triton's
outputs within a tolerance — JSON ``data`` and the binary tensor extension, every datatype's
decoding, and everything that must stay a mismatch."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from gateway.mirroring.compare import Answer, decode, same


def js(*outputs: dict[str, Any], version: str = "1", status: int = 200) -> Answer:
    doc = {"model_name": "m", "model_version": version, "id": "r", "outputs": list(outputs)}
    return Answer(status, json.dumps(doc).encode())


def out(data: Any, name: str = "y", datatype: str = "FP32", shape: Any = None) -> dict[str, Any]:
    shape = [len(data)] if shape is None else shape
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def binary(*outputs: tuple[str, str, list[Any]], version: str = "1") -> Answer:
    """An answer in the binary extension: (name, datatype, values) per output."""
    blobs, described = [], []
    for name, datatype, values in outputs:
        if datatype == "BYTES":
            blob = b"".join(struct.pack("<I", len(v)) + v for v in values)
        else:
            fmt = {"FP32": "f", "FP64": "d", "INT64": "q", "FP16": "e", "BOOL": "?"}[datatype]
            blob = struct.pack(f"<{len(values)}{fmt}", *values)
        blobs.append(blob)
        described.append(
            {
                "name": name,
                "datatype": datatype,
                "shape": [len(values)],
                "parameters": {"binary_data_size": len(blob)},
            }
        )
    header = json.dumps({"model_name": "m", "model_version": version, "outputs": described})
    return Answer(200, header.encode() + b"".join(blobs), len(header))


A = js(out([1.0, 2.0, 3.0]))
ONE = binary(("y", "FP32", [1.0]))
TRUNCATED = Answer(200, ONE.body[:-1], ONE.header_length)  # a blob shorter than announced


@pytest.mark.parametrize(
    ("primary", "shadow", "tolerance", "expected"),
    [
        # byte-equal (whatever the body) and nothing else without a tolerance
        (Answer(200, b"\x00\xff"), Answer(200, b"\x00\xff"), None, True),
        (Answer(200, b"ok"), Answer(500, b"ok"), None, False),
        (Answer(200, b"ok"), Answer(500, b"ok"), 1.0, False),  # status first
        (A, js(out([1.0, 2.0, 3.0]), version="2"), None, False),
        (Answer(200, b"ok", 2), Answer(200, b"ok", None), None, False),  # split differently
        # JSON outputs with a tolerance: values, datatype, shape, names
        (A, js(out([1.0, 2.0, 3.0]), version="2"), 0.0, True),  # other fields ignored
        (A, js(out([1.0005, 1.9995, 3.0])), 1e-3, True),
        (A, js(out([1.002, 2.0, 3.0])), 1e-3, False),
        (A, js(out([1.0, 2.0, 3.0], datatype="FP64")), 1.0, False),
        (A, js(out([1.0, 2.0, 3.0], shape=[3, 1])), 1.0, False),
        (A, js(out([1.0, 2.0])), 1.0, False),
        (A, js(out([1.0, 2.0, 3.0], name="z")), 1.0, False),
        (A, js(out([1.0, 2.0, 3.0]), out([1], name="extra")), 1.0, False),
        (js(out([[1, 2], [3, 4]], shape=[2, 2])), js(out([1, 2, 3, 4], shape=[2, 2])), 0.0, True),
        (js(out(["a", "b"], datatype="BYTES")), js(out(["a", "c"], datatype="BYTES")), 9.0, False),
        (js(out([True], datatype="BOOL")), js(out([False], datatype="BOOL")), 9.0, False),
        (js(out([float("nan")])), js(out([float("nan")])), 0.0, True),
        (Answer(200, b"not json"), Answer(200, b"not json!"), 1.0, False),
        (Answer(200, b'{"outputs": 3}'), Answer(200, b'{"outputs": 4}'), 1.0, False),
        # the binary extension: header as JSON, blobs as numbers of their datatype
        (
            binary(("y", "FP32", [1.0, 2.0])),
            binary(("y", "FP32", [1.0, 2.0005]), version="2"),
            1e-3,
            True,
        ),
        (binary(("y", "FP32", [1.0, 2.0])), binary(("y", "FP32", [1.0, 2.01])), 1e-3, False),
        (binary(("y", "FP32", [1.0, 2.0])), js(out([1.0, 2.0], shape=[2])), 0.0, True),
        (
            binary(("a", "INT64", [1, 2]), ("b", "FP64", [0.5])),
            binary(("a", "INT64", [1, 2]), ("b", "FP64", [0.5001])),
            1e-3,
            True,
        ),
        (
            binary(("a", "INT64", [1, 2]), ("b", "FP64", [0.5])),
            binary(("a", "INT64", [1, 3]), ("b", "FP64", [0.5])),
            0.5,
            False,
        ),
        (
            binary(("s", "BYTES", [b"x", b"yz"])),
            binary(("s", "BYTES", [b"x", b"yz"]), version="2"),
            0.0,
            True,
        ),
        (binary(("s", "BYTES", [b"x", b"yz"])), binary(("s", "BYTES", [b"x", b"yy"])), 9.0, False),
        (binary(("h", "FP16", [0.5, 1.5])), binary(("h", "FP16", [0.5, 1.5009765625])), 1e-2, True),
        (ONE, TRUNCATED, 1.0, False),
    ],
)
def test_same(primary: Answer, shadow: Answer, tolerance: float | None, expected: bool) -> None:
    assert same(primary, shadow, tolerance) is expected


@pytest.mark.parametrize(
    ("datatype", "blob", "values"),
    [
        ("INT8", b"\xff\x01", (-1, 1)),
        ("UINT8", b"\xff\x01", (255, 1)),
        ("INT16", b"\xfe\xff", (-2,)),
        ("UINT32", b"\x01\x00\x00\x00", (1,)),
        ("UINT64", b"\x02" + b"\x00" * 7, (2,)),
        ("FP32", struct.pack("<f", 0.25), (0.25,)),
        ("BF16", b"\x80\x3f\x00\x40", (1.0, 2.0)),  # the top halves of 1.0f and 2.0f
        ("BOOL", b"\x01\x00", (True, False)),
        ("BYTES", b"\x02\x00\x00\x00hi\x00\x00\x00\x00", [b"hi", b""]),
    ],
)
def test_decode(datatype: str, blob: bytes, values: Any) -> None:
    assert decode(datatype, blob) == values
