"""Whose objects these are: the installation's identity on the Kubernetes side.

Several installations may share a serving namespace (two releases, or a control plane
pointed at the wrong database). Each one stamps :data:`INSTALLATION_LABEL` (the id its
database was given at its first migration) and :data:`RELEASE_LABEL` on everything it
makes, lists and watches only through :meth:`Owner.selector`, and so never sees, changes
or deletes another's objects. The serving namespace records which database a release
belongs to in a ConfigMap (:func:`identity_config_map`); a control plane whose database
does not match it reconciles nothing (:func:`identity_problem`). Pure: no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Object = dict[str, Any]

LABEL_PREFIX = "openeas.io/"
MANAGED_BY = {"app.kubernetes.io/managed-by": "openeas"}
INSTALLATION_LABEL = LABEL_PREFIX + "installation"
RELEASE_LABEL = LABEL_PREFIX + "release"
IDENTITY_PREFIX = "openeas-installation-"
INSTALLATION_KEY = "installation"  # the ConfigMap's data key holding the database's id


@dataclass(frozen=True)
class Owner:
    """One installation: its database's id and its release name."""

    installation: str
    release: str

    def labels(self) -> dict[str, str]:
        return {INSTALLATION_LABEL: self.installation, RELEASE_LABEL: self.release}

    def selector(self, base: str) -> str:
        """``base`` (a label selector) narrowed to this installation's objects."""
        return f"{base},{INSTALLATION_LABEL}={self.installation},{RELEASE_LABEL}={self.release}"

    def conflict(self, live: Object) -> str | None:
        """Why ``live`` may not be changed by this installation (another one's object), or
        None. Objects from before identities were stamped carry none: they are adopted,
        since only a service of this database's can have asked for one by its name."""
        labels = live["metadata"].get("labels") or {}
        theirs = labels.get(INSTALLATION_LABEL)
        if theirs is None or (theirs, labels.get(RELEASE_LABEL)) == (
            self.installation,
            self.release,
        ):
            return None
        return (
            f"{live.get('kind', 'object')} {live['metadata']['name']} belongs to another "
            f"OpenEAS installation (release {labels.get(RELEASE_LABEL, 'unknown')!r}, "
            f"installation {theirs}); rename the service or remove that object"
        )


def config_map_name(release: str) -> str:
    return IDENTITY_PREFIX + release


def identity_config_map(owner: Owner) -> Object:
    """The record, in the serving namespace, that ``owner.release`` belongs to the database
    with id ``owner.installation``; written once, when missing."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(owner.release),
            "labels": {**MANAGED_BY, **owner.labels()},
        },
        "data": {INSTALLATION_KEY: owner.installation, "release": owner.release},
    }


def warning_event(owner: Owner, namespace: str, reason: str, message: str, now: str) -> Object:
    """A Warning Event about the installation's record (``kubectl describe`` on it, or
    ``kubectl get events``), for what no service owns."""
    record = config_map_name(owner.release)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": record + "."},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": record,
            "namespace": namespace,
        },
        "reason": reason,
        "message": message[:1000],
        "type": "Warning",
        "source": {"component": "openeas-controlplane"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def identity_problem(recorded: Object | None, owner: Owner) -> str | None:
    """Why ``owner`` must not reconcile, given the namespace's record (None when there is
    none yet: the caller writes it). None when the record names ``owner``'s database."""
    if recorded is None:
        return None
    theirs = (recorded.get("data") or {}).get(INSTALLATION_KEY)
    if theirs == owner.installation:
        return None
    name = recorded["metadata"]["name"]
    return (
        f"this control plane's database (installation {owner.installation}) is not the one "
        f"release {owner.release!r} was installed with (ConfigMap {name} records installation "
        f"{theirs}): refusing to reconcile, so that nothing of that installation is changed "
        "or deleted. Point OPENEAS_DATABASE_URL at that installation's database, or, if this "
        f"database is meant to take over, delete ConfigMap {name} and restart"
    )
