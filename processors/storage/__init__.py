"""Model repository storage: where a triton replica's models come from.

The triton processor calls :func:`parse_uri` to validate ``--model-repository`` at spec time,
:func:`resolve_local` to use a local repository in place, and :func:`pull` to fetch an
``oss://`` repository before ``tritonserver`` starts. Failures are
:class:`PermanentStorageError` (service ``Failed``, the message says what to fix) or
:class:`TemporaryStorageError` (retry with backoff).
"""

from processors.storage.errors import PermanentStorageError, StorageError, TemporaryStorageError
from processors.storage.pull import PullReport, pull
from processors.storage.uri import LocalLocation, Location, OssLocation, parse_uri, resolve_local

__all__ = [
    "LocalLocation",
    "Location",
    "OssLocation",
    "PermanentStorageError",
    "PullReport",
    "StorageError",
    "TemporaryStorageError",
    "parse_uri",
    "pull",
    "resolve_local",
]
