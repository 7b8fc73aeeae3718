"""``openeas secrets``: make the platform's generated secrets once, and never again.

The Helm chart runs it as a pre-install/pre-upgrade hook Job (Argo CD: a PreSync hook, on
every sync), so ``helm template`` and GitOps tools render no random values: the admin token
and the bundled database's password are drawn here, in the cluster, the first time only.
Each ``KEY[=SECRET/SEEDKEY]`` is a key of the Secret ``--name``; a key already there is
kept; a missing one is copied from ``SECRET``'s ``SEEDKEY`` when that exists (the values an
older chart kept in its own Secrets), else drawn at random. Values are never printed.
"""

from __future__ import annotations

import argparse
import base64
import secrets

from controlplane.runtime.base import RuntimeError_
from controlplane.runtime.kubernetes.client import Conflict, SecretStore
from controlplane.runtime.kubernetes.settings import KubernetesSettings

LABELS = {"app.kubernetes.io/part-of": "openeas", "app.kubernetes.io/created-by": "openeas-secrets"}
ATTEMPTS = 5


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    wanted = [_key(spec) for spec in args.keys]
    store = SecretStore(KubernetesSettings(namespace=args.namespace))
    try:
        for _ in range(ATTEMPTS):
            try:
                written = _ensure(store, args.name, wanted)
            except Conflict:
                continue  # changed between our read and our write: look again
            kept = sorted({k for k, _ in wanted} - set(written))
            print(
                f"openeas: Secret {args.namespace}/{args.name}: "
                f"added {', '.join(written) or 'nothing'}; kept {', '.join(kept) or 'nothing'}"
            )
            return 0
        print(f"openeas: Secret {args.namespace}/{args.name} kept changing; run again")
        return 1
    except RuntimeError_ as e:
        print(f"openeas: {e}")
        return 1
    finally:
        store.close()


def _ensure(store: SecretStore, name: str, wanted: list[tuple[str, str | None]]) -> list[str]:
    """Write what is missing; the keys written."""
    live = store.read(name)
    have = live[0] if live else {}
    missing = {key: _value(store, seed) for key, seed in wanted if key not in have}
    if not missing:
        return []
    if live is None:
        if not store.create(name, missing, LABELS):
            raise Conflict(f"Secret {name} appeared meanwhile")
    else:
        store.add(name, missing, live[1])
    return sorted(missing)


def _value(store: SecretStore, seed: str | None) -> str:
    """Base64 of the seed's value when there is one, else of a new random token."""
    if seed:
        secret, _, key = seed.partition("/")
        found = store.read(secret)
        if found and key in found[0]:
            return found[0][key]
    return base64.b64encode(secrets.token_urlsafe(32).encode()).decode()


def _key(spec: str) -> tuple[str, str | None]:
    key, _, seed = spec.partition("=")
    return key, seed or None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="openeas secrets",
        description="Create the keys of a generated Secret that do not exist yet (values "
        "are never replaced nor printed).",
        epilog="Connects as the control plane does (OPENEAS_K8S_IN_CLUSTER, "
        "OPENEAS_K8S_KUBECONFIG, OPENEAS_K8S_CONTEXT: docs/configuration.md).",
    )
    parser.add_argument("--namespace", required=True, help="namespace of the Secrets")
    parser.add_argument("--name", required=True, help="the Secret to complete")
    parser.add_argument(
        "keys",
        nargs="+",
        metavar="KEY[=SECRET/SEEDKEY]",
        help="a key to have; seeded from SECRET's SEEDKEY when that exists",
    )
    return parser
