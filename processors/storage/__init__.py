"""Model repository storage: where a triton replica's models come from.

The triton processor calls :func:`parse_uri` to validate ``--model-repository`` at spec time,
:func:`resolve_local` to use a local repository in place, and
:func:`processors.storage.pull.pull` to fetch an ``oss://`` repository before
``tritonserver`` starts. The package itself holds only what every replica needs: the pull
(the OSS client, its HTTP stack, the node cache) is imported by those that pull, so a
replica serving a local repository starts without it. Failures are
:class:`PermanentStorageError` (service ``Failed``, the message says what to fix) or
:class:`TemporaryStorageError` (retry with backoff).
"""

from processors.storage.errors import PermanentStorageError, StorageError, TemporaryStorageError
from processors.storage.uri import LocalLocation, Location, OssLocation, parse_uri, resolve_local

__all__ = [
    "LocalLocation",
    "Location",
    "OssLocation",
    "PermanentStorageError",
    "StorageError",
    "TemporaryStorageError",
    "parse_uri",
    "resolve_local",
]
