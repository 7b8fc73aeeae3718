"""Write docs/api.md from the control plane's OpenAPI document, so the REST reference is
the app's own description of itself.

``python docs/gen_api.py`` rewrites the file; ``--check`` exits 1 when it is out of date
(tests/deploy/test_docs.py runs the check). The app is built with an in-memory SQLite
engine: producing the OpenAPI document touches no database.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "api.md"
METHODS = ("get", "post", "put", "patch", "delete")

Schema = dict[str, Any]

HEADER = """\
# REST API reference

Generated from the control plane's OpenAPI document by `python docs/gen_api.py`; do not edit.
The live document is served at `/openapi.json` (and browsable at `/docs`). Every call except
the health checks needs `Authorization: Bearer <admin token>` (or the EAS SDK's
`x-acs-bearer-token: <admin token>`); errors are
`application/problem+json` (`type`, `title`, `status`, `detail`, and `errors` for invalid
specs). A body that is not JSON gets `400` with `errors` naming `line`, `column` and the
line as it should read, and `corrected`: the whole text with every fixable line corrected
(typographic quotes, a dash for `--`, trailing commas), as `eascmd` reports a config file.
`{cluster}` is the control plane's `OPENEAS_CLUSTER_ID`.

## With EAS's own SDK

The API is EAS's: the official `alibabacloud-eas20210701` SDK calls it unchanged, and
reads every answer with its own models (`ServiceConfig` is a JSON string, `Labels` a list of
`{LabelKey, LabelValue}`, ...). The SDK's `region_id` and every call's `ClusterId` are the
cluster id (`DescribeRegions` answers it):

```python
from alibabacloud_eas20210701.client import Client
from alibabacloud_eas20210701 import models
from alibabacloud_tea_openapi.models import Config

eas = Client(
    Config(
        endpoint="127.0.0.1:8080",
        protocol="http",
        region_id="local",
        type="bearer",
        bearer_token="<admin token>",
    )
)
eas.create_service(models.CreateServiceRequest(body=open("triton.config").read()))
print(eas.describe_service("local", "triton_test").body.status)
```

Each route is named after the SDK action it serves:
"""


def openapi() -> Schema:
    """The app's OpenAPI document, each operation marked with its SDK action
    (``x-sdk-action``: the route's name)."""
    if str(ROOT) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(ROOT))
    from fastapi.routing import APIRoute
    from sqlalchemy import create_engine

    from controlplane.api.app import create_app
    from controlplane.settings import Settings

    app = create_app(Settings(admin_token="unused"), create_engine("sqlite://"))
    document = app.openapi()
    for route in _routes(app.routes):
        if isinstance(route, APIRoute) and route.path in document["paths"]:
            for method in route.methods:
                op = document["paths"][route.path].get(method.lower())
                if op is not None:
                    op["x-sdk-action"] = route.name
    return document


def _routes(routes: list[Any]) -> list[Any]:
    """Every route, through included routers (kept as routers of their own)."""
    found = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        found += _routes(inner.routes) if inner is not None else [route]
    return found


def render(document: Schema) -> str:
    lines = [HEADER, "| SDK action | method | path |", "|---|---|---|"]
    actions = sorted(
        (op["x-sdk-action"], method.upper(), path)
        for path, method, op in _operations(document, None)
        if path.startswith("/api/v2/") and "x-sdk-action" in op
    )
    lines += [f"| `{a}` | {m} | `{p}` |" for a, m, p in actions]
    lines.append("")
    for tag in _tags(document):
        lines.append(f"## {tag.capitalize()}\n")
        for path, method, op in _operations(document, tag):
            lines += _operation(path, method, op)
    lines.append("## Schemas\n")
    for name, schema in sorted(document.get("components", {}).get("schemas", {}).items()):
        lines += _schema(name, schema)
    return "\n".join(lines).rstrip() + "\n"


def _tags(document: Schema) -> list[str]:
    seen: list[str] = []
    for _, _, op in _operations(document, None):
        for tag in op.get("tags", ["other"]):
            if tag not in seen:
                seen.append(tag)
    return seen


def _operations(document: Schema, tag: str | None) -> list[tuple[str, str, Schema]]:
    return [
        (path, method, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method in METHODS and (tag is None or tag in op.get("tags", ["other"]))
    ]


def _operation(path: str, method: str, op: Schema) -> list[str]:
    text = " ".join((op.get("description") or op.get("summary", "")).split())
    action = f" — `{op['x-sdk-action']}`" if "x-sdk-action" in op else ""
    lines = [f"### `{method.upper()} {path}`{action}\n", text.rstrip(".") + ".", ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required |", "|---|---|---|---|"]
        lines += [
            f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
            f"{'yes' if p.get('required') else 'no'} |"
            for p in params
        ]
        lines.append("")
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        lines.append(f"Body ({media}): {_type(content.get('schema', {}))}\n")
    responses = []
    for code, response in op.get("responses", {}).items():
        schemas = [_type(c.get("schema", {})) for c in response.get("content", {}).values()]
        what = [schemas[0]] if schemas and schemas[0] != "any" else []
        if response.get("description") not in (None, "", "Successful Response"):
            what.insert(0, response["description"])
        responses.append(f"`{code}`" + (f" {', '.join(what)}" if what else ""))
    lines += [f"Responses: {'; '.join(responses)}.", ""]
    return lines


def _schema(name: str, schema: Schema) -> list[str]:
    lines = [f"### {name}\n"]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    properties = schema.get("properties", {})
    if not properties:
        return [*lines, f"{_type(schema)}\n"]
    required = set(schema.get("required", []))
    lines += ["| field | type | required | default |", "|---|---|---|---|"]
    for field, prop in properties.items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        flag = "yes" if field in required else "no"
        lines.append(f"| `{field}` | {_type(prop)} | {flag} | {default} |")
    return [*lines, ""]


def _type(schema: Schema) -> str:
    """A short human spelling of a JSON schema: ``ServiceSpec``, ``list of string``, …"""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in schema:
            kinds = [_type(s) for s in schema[combinator]]
            return " or ".join(k for k in kinds if k != "null") + (
                " (nullable)" if "null" in kinds else ""
            )
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return f"map of {_type(extra) if isinstance(extra, dict) else 'any'}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return str(kind) if kind else "any"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    args = parser.parse_args(argv)
    text = render(openapi())
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET} is out of date: run python docs/gen_api.py", file=sys.stderr)
            return 1
        print(f"{TARGET} is current")
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
