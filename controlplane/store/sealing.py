"""Service and group tokens at rest: sealed with Fernet (AES-128-CBC + HMAC-SHA256, from
``cryptography``, the one module that imports it), so the database — a SQLite file, a
PostgreSQL dump, a backup — never holds a usable token. Tokens are opened for the explicit
admin "show token" calls, and for the route table (served to route-reader credentials only):
the gateway checks EAS-signed predict calls with them (an HMAC keyed by the token).

Keys come from ``OPENEAS_SECRET_KEY``: one or more secrets separated by commas, the first
seals, every one opens (rotation: put the new one first, run ``openeas migrate --reseal``,
then drop the old). Without it, a key generated once into ``<data dir>/secret_key`` (0600).
Any secret of 16+ characters works: the Fernet key is derived from it with SHA-256.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

PREFIX = "sealed:"
KEY_FILE = "secret_key"


class SealError(RuntimeError):
    """A sealed value no configured key opens (the key was lost or rotated away)."""


class TokenSealer:
    def __init__(self, keys: list[str]) -> None:
        if not keys or any(len(k) < 16 for k in keys):
            raise ValueError("OPENEAS_SECRET_KEY: give secrets of at least 16 characters")
        self._fernet = MultiFernet([Fernet(_derive(k)) for k in keys])

    def seal(self, token: str) -> str:
        return PREFIX + self._fernet.encrypt(token.encode()).decode()

    def open(self, stored: str) -> str:
        """The token; a value stored before sealing existed is returned as it is."""
        if not stored.startswith(PREFIX):
            return stored
        try:
            return self._fernet.decrypt(stored[len(PREFIX) :].encode()).decode()
        except InvalidToken as e:
            raise SealError(
                "a stored token cannot be opened with OPENEAS_SECRET_KEY: was the key "
                "changed without keeping the old one after it?"
            ) from e

    def reseal(self, stored: str) -> str:
        """Sealed with the first key (plain values sealed for the first time)."""
        if not stored.startswith(PREFIX):
            return self.seal(stored)
        token = self._fernet.rotate(stored[len(PREFIX) :].encode())
        return PREFIX + token.decode()


def from_settings(secret_key: str, data_dir: Path) -> TokenSealer:
    """The sealer of these settings: OPENEAS_SECRET_KEY's keys, else the data dir's key
    file, made on first use with mode 0600."""
    keys = [k.strip() for k in secret_key.split(",") if k.strip()]
    if keys:
        return TokenSealer(keys)
    path = data_dir / KEY_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first: use theirs
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
    return TokenSealer([path.read_text().strip()])


def _derive(secret: str) -> bytes:
    return base64.urlsafe_b64encode(hashlib.sha256(secret.encode()).digest())
