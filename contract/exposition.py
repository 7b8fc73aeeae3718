"""Prometheus' text exposition format (version 0.0.4): the pieces of a sample line that the
gateway's and the control plane's ``/metrics`` both write."""

from __future__ import annotations

from collections.abc import Iterable


def escape(value: str) -> str:
    """A label value as the format quotes it: backslash, newline and double quote escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_set(names: Iterable[str], values: Iterable[str], extra: str = "") -> str:
    """``{name="value",…}`` (``extra``, e.g. ``le="0.5"``, last); "" with no label."""
    parts = [f'{n}="{escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def number(value: float) -> str:
    """A sample value: integers without a decimal point, infinity as ``+Inf``."""
    if value == float("inf"):
        return "+Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))
