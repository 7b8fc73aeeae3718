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
the health checks needs `Authorization: Bearer <admin token>`; errors are
`application/problem+json` (`type`, `title`, `status`, `detail`, and `errors` for invalid
specs). A body that is not JSON gets `400` with `errors` naming `line`, `column` and the
line as it should read, and `corrected`: the whole text with every fixable line corrected
(typographic quotes, a dash for `--`, trailing commas), as `eascmd` reports a config file.
`{cluster}` is the control plane's `OPENEAS_CLUSTER_ID`.
"""

# Not the control plane's: the gateway's predict calls, and how they authenticate.
GATEWAY = """## Predict calls (the gateway)

`/api/predict/<service>/<Triton path>` is the gateway's, not the control plane's: it relays
the call to a ready replica (`/api/predict/<group>/…` to a member the group's traffic split
picks, `/api/predict/<group>.<service>/…` to that member). The call opens with the
service's token (a group: the group's token or any member's), sent in any of three forms:

| `Authorization` | |
|---|---|
| `<token>` | EAS's bare token |
| `Bearer <token>` | |
| `EAS <signature>` | EAS's signature: what `eas_prediction.PredictClient` sends by default |

The signature is

```
base64(HMAC-SHA1(<token>, "POST\\n<Content-MD5>\\n<Content-Type>\\n<Date>\\n<path>"))
```

with the call's `Content-MD5` header (the hex MD5 of its body), `Content-Type` header (empty
when there is none) and `Date` header (RFC 1123, GMT), and `<path>` the request path as sent,
beginning `/api/predict/` (with its query string, if any); `POST` is the call's method. The
gateway checks every signed call in full: its `Date` within 15 minutes of the gateway's clock
(`OPENEAS_GATEWAY_SIGNATURE_SKEW_S`), the signature, and the body against `Content-MD5`,
before any of the body reaches a replica. A signed body not all in when the head is read
(over `OPENEAS_GATEWAY_BUFFER_BODY_BYTES`, or chunked) is read whole first, within
`OPENEAS_GATEWAY_MAX_BODY_BYTES`; unsigned bodies stream.

A refusal is `401` (`application/problem+json`, `WWW-Authenticate: Bearer realm="openeas"`)
whose `detail` names what was wrong: no `Date`, or one that is not an RFC 1123 date; a
`Date` too far from the gateway's clock (by how much, ahead or behind); no `Content-MD5`; a
body that does not match its `Content-MD5`; a signature that does not match (a tampered
path, `Content-Type` or `Date`, or another key); or a gateway that cannot check signatures
for the service yet (it serves a route table from its snapshot, which never holds tokens, or
from a control plane that predates signed calls: the token itself still opens). Signatures
and tokens are never logged.

`eas_prediction` writes the client's *local* time and labels it GMT: a client outside UTC
must run with `TZ=UTC`, or its calls are refused as skewed by its offset. The gRPC door takes
the token in the `authorization` metadata only: EAS signs HTTP calls alone.
"""


def openapi() -> Schema:
    if str(ROOT) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(ROOT))
    from sqlalchemy import create_engine

    from controlplane.api.app import create_app
    from controlplane.settings import Settings

    app = create_app(Settings(admin_token="unused"), create_engine("sqlite://"))
    return app.openapi()


def render(document: Schema) -> str:
    lines = [HEADER, GATEWAY]
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
    lines = [f"### `{method.upper()} {path}`\n", text.rstrip(".") + ".", ""]
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
