"""The work directory beside a pull's destination, and the atomic swap into place.

:func:`processors.storage.pull.pull` assembles the new repository in
``<parent>/.<name>.openeas/tree-*`` and calls :meth:`Workspace.commit`, which swaps it with
``<dest>`` in one ``renameat2(RENAME_EXCHANGE)`` (two renames where the kernel lacks it), so a
reader such as Triton sees the old repository or the new one, never a mix. The same directory
keeps ``partial/`` (resumable downloads, see :mod:`processors.storage.partial`) and a lock
file, so two replicas pulling into one destination take turns instead of racing.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from processors.storage.errors import PermanentStorageError
from processors.storage.manifest import NAME as MANIFEST_NAME

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class Workspace:
    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.root = dest.parent / f".{dest.name}.openeas"
        self.partials = self.root / "partial"

    @contextmanager
    def locked(self) -> Iterator[Workspace]:
        self._check_dest()
        try:
            self.partials.mkdir(parents=True, exist_ok=True)
            lock = (self.root / "lock").open("a")
        except OSError as e:
            raise PermanentStorageError(
                f"cannot create {self.root} beside {self.dest} ({e.strerror}): pull into a "
                "directory whose parent is writable"
            ) from e
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield self

    def new_tree(self) -> Path:
        for stale in self.root.glob("tree-*"):  # left by a pull that was killed
            shutil.rmtree(stale, ignore_errors=True)
        return Path(tempfile.mkdtemp(prefix="tree-", dir=self.root))

    def commit(self, tree: Path) -> None:
        """Put ``tree`` at ``dest`` atomically, drop the old copy and the finished downloads."""
        try:
            if not self.dest.exists():
                os.rename(tree, self.dest)
            elif _exchange(tree, self.dest):
                shutil.rmtree(tree)
            else:
                old = Path(tempfile.mkdtemp(prefix="old-", dir=self.root))
                os.rename(self.dest, old / "repository")
                os.rename(tree, self.dest)
                shutil.rmtree(old)
        except OSError as e:
            raise PermanentStorageError(
                f"cannot move the pulled repository into {self.dest} ({e.strerror}): if it is "
                f"a mount point, pull into a subdirectory of it (e.g. {self.dest}/repository)"
            ) from e
        shutil.rmtree(self.partials, ignore_errors=True)

    def _check_dest(self) -> None:
        if self.dest.is_symlink() or (self.dest.exists() and not self.dest.is_dir()):
            raise PermanentStorageError(f"{self.dest} exists and is not a directory: remove it")
        if (
            self.dest.is_dir()
            and any(self.dest.iterdir())
            and not (self.dest / MANIFEST_NAME).exists()
        ):
            raise PermanentStorageError(
                f"{self.dest} is not empty and was not made by a pull (no {MANIFEST_NAME}): "
                "pull into a new or empty directory, a pull replaces its whole content"
            )


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directory entries atomically; ``False`` where the kernel or libc cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))
