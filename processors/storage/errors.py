"""Storage errors: the one hierarchy every model-pull failure is raised as.

The processor and the control plane catch these; the control plane maps
:class:`PermanentStorageError` to service status ``Failed`` (with ``str(error)`` as the reason)
and :class:`TemporaryStorageError` to a requeue with backoff. Messages are one line a user can
act on, and never carry a credential or a signed URL.
"""

from __future__ import annotations


class StorageError(Exception):
    """A model repository could not be read."""

    def __init__(self, message: str) -> None:
        # A reason ends up in a one-line status field: keep it on one line whatever the source.
        super().__init__(" ".join(message.split()))


class PermanentStorageError(StorageError):
    """Retrying will not help until the user changes something (URI, credentials, ACL, data)."""


class TemporaryStorageError(StorageError):
    """Network trouble or a server-side error: retrying later may succeed."""
