"""EAS's safety lock: which operations a locked service refuses. Pure; ``Services`` asks it
inside each write's transaction, with the SDK action name of the operation.

Levels: ``none`` (or unset) refuses nothing; ``dangerous`` refuses the operations that take
a service down or throw its state away (delete, stop, restart, instance restarts, going back
to another version, removing its scalers); ``all`` refuses every change but the lock itself.
"""

from __future__ import annotations

from typing import Literal

from controlplane.model.errors import ControlPlaneError

Level = Literal["none", "dangerous", "all"]
LEVELS: tuple[Level, ...] = ("none", "dangerous", "all")

DANGEROUS = frozenset(
    {
        "DeleteService",
        "StopService",
        "RestartService",
        "DeleteServiceInstances",
        "UpdateServiceVersion",
        "DeleteServiceAutoScaler",
        "DeleteServiceCronScaler",
    }
)
UNLOCK = "UpdateServiceSafetyLock"


class ServiceLocked(ControlPlaneError):
    status = 403
    title = "Service locked"


def refuses(lock: str, action: str) -> bool:
    """Whether a service with ``lock`` (as stored: "" is none) refuses ``action``."""
    if action == UNLOCK or lock in ("", "none"):
        return False
    return lock == "all" or action in DANGEROUS


def check(name: str, lock: str, action: str) -> None:
    if refuses(lock, action):
        raise ServiceLocked(
            f"service {name!r} has safety lock {lock!r}, which refuses {action}: unlock it "
            f"first with UpdateServiceSafetyLock Lock=none (eascmd lock {name} none)"
        )
