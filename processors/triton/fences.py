"""Triton's own fences around its admin APIs, set by the platform on every replica.

:func:`processors.triton.run.tritonserver_argv` adds :func:`restricted_api_args` to each
tritonserver it starts. The gateway already refuses tenants' admin paths, but a replica's
ports are reachable from inside the cluster too; with these flags Triton itself answers
those APIs only to requests carrying :data:`HEADER` with the replica's key. The key is
drawn per start and never written anywhere, so nobody holds it: the admin APIs are off,
whatever the tenant's flags (``--model-control-mode=explicit`` included). Tenants cannot
pass these flags (:mod:`.flags` refuses them). Health, metadata, inference, statistics and
model config stay open: readiness probes and the gateway's tenant paths use them.
"""

from __future__ import annotations

import secrets

# Triton's API category names (tritonserver --help, "Allowed APIs").
RESTRICTED_APIS = ("model-repository", "shared-memory", "trace", "logging")
HEADER = "openeas-admin-key"


def new_key() -> str:
    return secrets.token_urlsafe(32)


def restricted_api_args(key: str) -> list[str]:
    """Both protocols' restriction flags, keyed by ``HEADER: key``."""
    fence = f"{','.join(RESTRICTED_APIS)}:{HEADER}={key}"
    return [f"--http-restricted-api={fence}", f"--grpc-restricted-protocol={fence}"]
