"""Write docs/api.md from the control plane's OpenAPI document, so the REST reference is
the app's own description of itself.

``python docs/gen_api.py`` rewrites the file; ``--check`` exits 1 when it is out of date
(tests/deploy/test_docs.py runs the check). The app is built with an in-memory SQLite
engine: producing the OpenAPI document touches no database.
"""

from __future__ import annotations

import argparse
import json
import re
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
The live document is served at `/openapi.json` (and browsable at `/docs`). Errors are
`application/problem+json` (`type`, `title`, `status`, `detail`, and `errors` for invalid
specs) with Alibaba Cloud's `RequestId`, `Code` and `Message` beside them (the same
RequestId is in the `x-acs-request-id` header), so EAS's SDK shows the code. A body that is
not JSON gets `400` with `errors` naming `line`, `column` and the line as it should read,
and `corrected`: the whole text with every fixable line corrected (typographic quotes, a
dash for `--`, trailing commas), as `eascmd` reports a config file. `{cluster}` is the
control plane's `OPENEAS_CLUSTER_ID`.

## Authentication

Every call except the health checks carries one credential:

- **AccessKey signature, `ACS3-HMAC-SHA256`**, as EAS's OpenAPI SDK sends it by default
  (and `eascmd config -i <AccessKeyId> -k <secret>`): `Authorization: ACS3-HMAC-SHA256
  Credential=<AccessKeyId>,SignedHeaders=…,Signature=…`, signing at least `host`,
  `x-acs-date` (UTC, within 15 minutes of the server), `x-acs-signature-nonce` (accepted
  once) and `x-acs-content-sha256` (the body's SHA-256).
- **AccessKey signature, ROA v1**: `Authorization: acs <AccessKeyId>:<base64 HMAC-SHA1>`
  (the SDK with `signature_algorithm="v2"`), with `Date` within 15 minutes and
  `x-acs-signature-nonce` accepted once; it covers the body only when `Content-MD5` is sent.
- **Bearer**: `Authorization: Bearer <credential>` or `x-acs-bearer-token: <credential>`,
  the credential being the admin token (`OPENEAS_ADMIN_TOKEN`, the root credential), the
  gateway's route-reader token (`/internal/v1/*` only), or `<AccessKeyId>:<AccessKeySecret>`.

AccessKey pairs (`POST /api/v2/accesskeys`, `eascmd accesskey create`) have a role:
`admin` (everything, AccessKeys and the audit trail included), `developer` (services and
groups: create, change, scale, delete, tokens) or `viewer` (reads only), and optionally
`Services`, globs (`*`, `?`) of the service and group names they cover (all when omitted;
an admin is never narrowed; the names a write's body gives, a new service's `name` and the
`metadata.group` it joins, must match too). The action of a call is its route's name below
(the SDK's action name); an action `controlplane/model/roles.py` does not classify is
admin-only. The secret is shown once and sealed at rest with `OPENEAS_SECRET_KEY`; a deleted
key is refused by every control-plane replica within a second.

Refusals: `401` `MissingAuthorization`, `InvalidAccessKeyId.NotFound` (unknown or revoked),
`SignatureDoesNotMatch` (secret, path, query, a signed header or the body changed),
`InvalidTimeStamp.Expired`, `InvalidTimeStamp.Format`, `SignatureNonceUsed`,
`InvalidBearerToken`, `InvalidAccessKeySecret`; `400` `IncompleteSignature`; `403`
`Forbidden` (the role or the globs do not allow the action). Other codes: `InvalidParameter`,
`InvalidService.NotFound`, `InvalidService.AlreadyExists`, `InvalidGroup.NotFound`,
`Conflict`, `PreconditionFailed`. Every write and every refusal is recorded in the audit
trail (`GET /api/v2/audit`, `eascmd audit`). Using the official SDK: [sdk.md](sdk.md).
"""
ACTIONS = """\
## Actions

Each route is named after the SDK action it serves:
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
    lines = [HEADER, GATEWAY, ACTIONS, "| SDK action | method | path |", "|---|---|---|"]
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
    lines = [f"### `{method.upper()} {path}`\n", text.rstrip(".") + ".", ""]
    action = re.match(r"[A-Z][A-Za-z]+(?=_)", op.get("operationId", ""))
    if action:  # the route's name=: the SDK's action, what roles are granted
        lines[1:1] = [f"Action: `{action.group(0)}`.", ""]
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
