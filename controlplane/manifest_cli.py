"""``openeas manifests <service.json>``: print the Kubernetes objects of a service as YAML.

A dry run users can read, diff and ``kubectl apply``: the spec goes through the API's own
checks (:func:`controlplane.model.spec.validate_spec`, the resource groups) and the objects come
from :func:`controlplane.runtime.kubernetes.manifests.desired_objects` with the runtime's
settings (``OPENEAS_K8S_*``), so they are exactly what the kubernetes runtime would apply.
Only the service's uid and generation, which exist once it is stored, are placeholders.
Errors are one clear message, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

import yaml
from pydantic import ValidationError

from contract.configfile import ConfigFileError, read_config
from controlplane.model.errors import InvalidSpec
from controlplane.model.spec import split_token, validate_spec
from controlplane.model.states import ServiceState
from controlplane.reconcile.desired import desired
from controlplane.runtime.base import PermanentRuntimeError
from controlplane.runtime.kubernetes.manifests import check_resource_group, desired_objects
from controlplane.runtime.kubernetes.settings import KubernetesSettings

PROG = "openeas manifests"


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        print(render(args.config, args), end="")
    except _Failed as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


class _Failed(Exception):
    pass


def render(config: str, args: argparse.Namespace) -> str:
    """The multi-document YAML for the service in ``config``."""
    try:
        data = read_config(config)
    except ConfigFileError as e:
        raise _Failed(f"{PROG}: {e}") from e
    try:
        spec = validate_spec(data)
    except InvalidSpec as e:
        lines = [f"{PROG}: {config} is not a valid service spec:"]
        lines += [f"  {p.field}: {p.message}" + (f"; {p.fix}" if p.fix else "") for p in e.problems]
        raise _Failed("\n".join(lines)) from e
    try:
        settings = KubernetesSettings()
    except ValidationError as e:
        raise _Failed(f"{PROG}: bad OPENEAS_K8S_* setting: {e}") from e
    if args.namespace:
        settings = settings.model_copy(update={"namespace": args.namespace})
    problem = check_resource_group(spec.metadata.resource, settings)
    if problem is not None:
        raise _Failed(f"{PROG}: metadata.resource: {problem}")
    stored, _token = split_token(spec)  # the token never reaches a manifest
    state = ServiceState(spec.name, args.uid, args.generation, stored, False, False)
    try:
        objects = desired_objects(desired(state), settings)
    except PermanentRuntimeError as e:
        raise _Failed(f"{PROG}: {e.reason}: {e.message}") from e
    return yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Print the Kubernetes objects the kubernetes runtime applies for a "
        "service (settings from OPENEAS_K8S_*).",
    )
    parser.add_argument("config", help="the service's EAS JSON, as given to eascmd create")
    parser.add_argument(
        "--namespace", help="namespace of the objects (default $OPENEAS_K8S_NAMESPACE)"
    )
    parser.add_argument(
        "--uid", default="dry-run", help="the service uid label, a placeholder (default dry-run)"
    )
    parser.add_argument(
        "--generation", type=int, default=1, help="the generation label (default 1)"
    )
    return parser
