"""Where ``eascmd`` finds the control plane and its credential: ``~/.eascmd/config``
(written by ``eascmd config`` or ``openeas up``, mode 0600), overridden by ``EAS_ENDPOINT``,
``EAS_TOKEN``, ``EAS_ACCESS_KEY_ID`` and ``EAS_REGION``. The credential is the admin token,
or an AccessKey pair (``access_key_id`` set, ``token`` then its secret)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Profile:
    endpoint: str
    token: str
    region: str = "local"  # the control plane's OPENEAS_CLUSTER_ID, used in API paths
    access_key_id: str = ""  # set: requests are signed, and ``token`` is the AccessKeySecret


class NoProfile(RuntimeError):
    pass


def path() -> Path:
    return Path.home() / ".eascmd" / "config"


def save(profile: Profile, where: Path | None = None) -> Path:
    target = where or path()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = target.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        stored = {"endpoint": profile.endpoint, "token": profile.token, "region": profile.region}
        if profile.access_key_id:
            stored["access_key_id"] = profile.access_key_id
        json.dump(stored, f)
    os.chmod(tmp, 0o600)
    tmp.replace(target)
    return target


def load() -> Profile:
    stored: dict[str, str] = {}
    if path().exists():
        stored = json.loads(path().read_text())
    endpoint = os.environ.get("EAS_ENDPOINT") or stored.get("endpoint", "")
    token = os.environ.get("EAS_TOKEN") or stored.get("token", "")
    if not endpoint or not token:
        raise NoProfile(
            "no control plane configured: run 'eascmd config -e <endpoint> -k <admin token>' "
            "or 'eascmd config -e <endpoint> -i <AccessKeyId> -k <AccessKeySecret>' "
            "(or set EAS_ENDPOINT and EAS_TOKEN)"
        )
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    region = os.environ.get("EAS_REGION") or stored.get("region") or "local"
    if os.environ.get("EAS_TOKEN"):  # an overriding token comes with its own key id, or none
        key_id = os.environ.get("EAS_ACCESS_KEY_ID", "")
    else:
        key_id = os.environ.get("EAS_ACCESS_KEY_ID") or stored.get("access_key_id", "")
    return Profile(endpoint.rstrip("/"), token, region, key_id)
