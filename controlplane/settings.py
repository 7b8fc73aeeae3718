"""Typed settings of the control plane (and of `openeas up`), read from ``OPENEAS_*``.

One object, built once by the entry point and passed down explicitly; Alembic's env reads
the same object so migrations hit the database the server uses.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from controlplane.runtime.kubernetes.settings import KubernetesSettings

ADMIN_TOKEN_FILE = "admin_token"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPENEAS_", extra="ignore")

    data_dir: Path = Path(".openeas")
    database_url: str = ""  # empty: SQLite file in data_dir
    admin_token: str = Field(default="", repr=False)
    # The gateway's route-reader credential: opens the route table, nothing else.
    routes_token: str = Field(default="", repr=False)
    # Seals service and group tokens at rest (controlplane.store.sealing); empty: a key file.
    secret_key: str = Field(default="", repr=False)
    # How long the audit trail keeps an entry (controlplane.store.audit).
    audit_retention_days: float = Field(default=90.0, gt=0)
    cluster_id: str = "local"
    public_url: str = ""  # what endpoints are shown as; empty: the server's own address
    intranet_url: str = ""
    runtime: Literal["local", "kubernetes"] = "local"
    # Async services' queues (redis://host:port/db), shared with the gateway; empty: `openeas
    # up` starts an embedded Redis in the data dir.
    redis_url: str = Field(default="", repr=False)
    # Upstream timeout the gateway applies when a spec sets no metadata.rpc.keepalive.
    default_timeout_ms: int = 600_000
    # Desired-state knobs of the reconciler.
    resync_seconds: float = 30.0
    # The reconciler's leader lease: with several control planes, a leader that dies is
    # replaced within this many seconds (renewed every third of it).
    lease_seconds: float = Field(default=15.0, ge=1)
    # The kubernetes runtime's own settings (OPENEAS_K8S_*), used when runtime=kubernetes.
    k8s: KubernetesSettings = Field(default_factory=KubernetesSettings)

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'openeas.db').resolve()}"

    def public_base(self, fallback: str) -> str:
        return (self.public_url or fallback).rstrip("/")

    def intranet_base(self, fallback: str) -> str:
        return (self.intranet_url or self.public_url or fallback).rstrip("/")


def ensure_admin_token(settings: Settings) -> tuple[Settings, bool]:
    """Settings with an admin token: from the environment, else the one stored in the data
    dir, else a new one written there with mode 0600. The flag says it was just created, so
    the caller prints it once and never again."""
    if settings.admin_token:
        return settings, False
    path = settings.data_dir / ADMIN_TOKEN_FILE
    if path.exists():
        return settings.model_copy(update={"admin_token": path.read_text().strip()}), False
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return settings.model_copy(update={"admin_token": token}), True
