"""Whether a shadow answered as the primary did: pure logic, used by :mod:`gateway.mirroring.mirror`
once both answers are in.

Equal status and byte-equal bodies match. With a tolerance, Triton's answers are compared
output by output (by name): datatype and shape equal, values within the absolute tolerance —
whether the values travel as JSON ``data`` or in the binary tensor extension
(``Inference-Header-Content-Length``: a JSON header, then each output's bytes in the order
the header lists them, sized by its ``binary_data_size``). Other fields (``model_version``,
``id``, ``parameters``) are not compared: a shadow is usually another version of the model.
Anything that is not such an answer matches only byte-for-byte.

Decoding uses :mod:`struct` (little-endian, as Triton sends), not numpy: the gateway does not
load numpy.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

Value = float | int | bool | str | bytes
Tensor = tuple[str, list[int], Sequence[Value]]  # datatype, shape, values (flat)

_FORMATS = {
    "BOOL": "?",
    "INT8": "b",
    "INT16": "h",
    "INT32": "i",
    "INT64": "q",
    "UINT8": "B",
    "UINT16": "H",
    "UINT32": "I",
    "UINT64": "Q",
    "FP16": "e",
    "FP32": "f",
    "FP64": "d",
}


@dataclass(frozen=True, slots=True)
class Answer:
    """One complete answer: status, body, and its ``Inference-Header-Content-Length``."""

    status: int
    body: bytes
    header_length: int | None = None


class NotTensors(ValueError):
    """The body is not a Triton inference answer this module can read."""


def same(primary: Answer, shadow: Answer, tolerance: float | None) -> bool:
    """True when ``shadow`` answered as ``primary`` did (see the module docstring)."""
    if primary.status != shadow.status:
        return False
    if primary.body == shadow.body and primary.header_length == shadow.header_length:
        return True
    if tolerance is None:
        return False
    try:
        a, b = outputs(primary), outputs(shadow)
    except NotTensors:
        return False
    return a.keys() == b.keys() and all(_tensor_close(a[k], b[k], tolerance) for k in a)


def outputs(answer: Answer) -> dict[str, Tensor]:
    """The answer's output tensors by name; :class:`NotTensors` if it has none to read."""
    body, hlen = answer.body, answer.header_length
    try:
        doc = json.loads(body if hlen is None else body[:hlen])
        found: dict[str, Tensor] = {}
        offset = hlen or 0
        for out in doc["outputs"]:
            datatype, shape = out["datatype"], out["shape"]
            size = out.get("parameters", {}).get("binary_data_size")
            if size is None:
                values: Sequence[Value] = list(_flatten(out["data"]))
            else:
                if not isinstance(size, int) or offset + size > len(body):
                    raise NotTensors("binary_data_size past the end of the body")
                values = decode(datatype, body[offset : offset + size])
                offset += size
            if not isinstance(shape, list) or out["name"] in found:
                raise NotTensors("bad output")
            found[out["name"]] = (datatype, shape, values)
    except (ValueError, KeyError, TypeError, AttributeError, struct.error) as e:
        raise NotTensors(str(e)) from e
    return found


def decode(datatype: str, blob: bytes) -> Sequence[Value]:
    """An output's values from its bytes in the binary tensor extension."""
    if datatype == "BYTES":
        return _bytes_elements(blob)
    if datatype == "BF16":
        # bfloat16 is the top half of a float32: widen each element, then read float32s.
        if len(blob) % 2:
            raise NotTensors("odd BF16 length")
        blob = b"".join(b"\0\0" + blob[i : i + 2] for i in range(0, len(blob), 2))
        datatype = "FP32"
    fmt = _FORMATS.get(datatype)
    if fmt is None:
        raise NotTensors(f"unknown datatype {datatype!r}")
    count, rest = divmod(len(blob), struct.calcsize(fmt))
    if rest:
        raise NotTensors(f"{len(blob)} bytes is not a whole number of {datatype}")
    return struct.unpack(f"<{count}{fmt}", blob)


def _bytes_elements(blob: bytes) -> list[bytes]:
    out: list[bytes] = []
    i = 0
    while i < len(blob):
        (n,) = struct.unpack_from("<I", blob, i)
        i += 4
        if i + n > len(blob):
            raise NotTensors("BYTES element past the end")
        out.append(blob[i : i + n])
        i += n
    return out


def _flatten(data: Any) -> Iterator[Value]:
    if isinstance(data, list):
        for item in data:
            yield from _flatten(item)
    elif isinstance(data, dict | type(None)):
        raise NotTensors("data holds an object")
    else:
        yield data


def _tensor_close(a: Tensor, b: Tensor, tolerance: float) -> bool:
    (type_a, shape_a, values_a), (type_b, shape_b, values_b) = a, b
    if type_a != type_b or shape_a != shape_b or len(values_a) != len(values_b):
        return False
    return all(_close(x, y, tolerance) for x, y in zip(values_a, values_b, strict=True))


def _close(x: Value, y: Value, tolerance: float) -> bool:
    if x == y:
        return True
    if isinstance(x, bool) or isinstance(y, bool):
        return False  # booleans, strings and bytes are equal or not
    if isinstance(x, int | float) and isinstance(y, int | float):
        if math.isnan(x) and math.isnan(y):
            return True
        return abs(x - y) <= tolerance
    return False
