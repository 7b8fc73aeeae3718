"""The one place that talks to the Kubernetes API (the official ``kubernetes`` client).

:class:`~.runtime.KubernetesRuntime` calls it from worker threads (the client blocks).
Objects go in and come out as plain JSON dicts, shaped like the manifests of
:mod:`.manifests`, so the runtime compares and reads them without the client's models.
Every failure leaves here as the runtime's own error type (``raise … from e``):
temporary (unreachable, 5xx, 429, 409 :class:`Conflict`, 410 :class:`Gone`) or permanent
(400, 403, 404, 422, with the API's ``Status`` message), never as ``ApiException``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from controlplane.runtime.base import PermanentRuntimeError, TemporaryRuntimeError
from controlplane.runtime.kubernetes.settings import KubernetesSettings

# The client imports its API classes on first use (about 300 modules: seconds on a busy
# node). Resolved here, as a control plane starts, so one that takes over a dead leader's
# lease, or answers its first `eascmd logs`, does not pay for them then.
APIS = (k8s.AppsV1Api, k8s.CoreV1Api, k8s.PolicyV1Api, k8s.CustomObjectsApi)

Object = dict[str, Any]
MAX_MESSAGE = 400  # characters of an API error message we pass on (never a whole body)
LOG_LIMIT_BYTES = 1 << 20
FOLLOW_READ_TIMEOUT = 86_400.0  # a followed log silent this long ends


@dataclass(frozen=True)
class Kind:
    kind: str
    api_version: str
    method: str  # the client's method suffix: read_namespaced_<method>, …


DEPLOYMENT = Kind("Deployment", "apps/v1", "deployment")
SERVICE = Kind("Service", "v1", "service")
POD = Kind("Pod", "v1", "pod")
DISRUPTION_BUDGET = Kind("PodDisruptionBudget", "policy/v1", "pod_disruption_budget")
SECRET = Kind("Secret", "v1", "secret")  # only the node cache's token (manifests.py)
# The installation's record (serving namespace), the route snapshot (release namespace).
CONFIG_MAP = Kind("ConfigMap", "v1", "config_map")
EVENT = Kind("Event", "v1", "event")  # written, never read back
KINDS = {
    k.kind: k for k in (DEPLOYMENT, SERVICE, POD, DISRUPTION_BUDGET, SECRET, CONFIG_MAP, EVENT)
}


class LogStream:
    """A followed log: iterate for its text as it comes; :meth:`close` (any thread) ends it."""

    def __init__(self, response: urllib3.BaseHTTPResponse, forget: Any) -> None:
        self._response = response
        self._forget = forget

    def __iter__(self) -> Iterator[str]:
        try:
            with _boundary("follow log"):
                for chunk in self._response.stream(4096, decode_content=True):
                    yield chunk.decode("utf-8", "replace")
        except (TemporaryRuntimeError, PermanentRuntimeError):
            return  # closed under us, or the API went away: the follow ends
        finally:
            self._forget()

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, ValueError, OSError):
            self._response.shutdown()
        with contextlib.suppress(RuntimeError, ValueError, OSError):
            self._response.release_conn()


class Conflict(TemporaryRuntimeError):
    """409: the object changed since it was read (or already exists): re-read and retry."""


class Gone(TemporaryRuntimeError):
    """410: a watch's resourceVersion is too old: relist, then watch again."""


class NotFound(PermanentRuntimeError):
    """404 on a write: the namespace (or the object) is missing."""


class KubeClient:
    """Namespaced CRUD, watch and logs for the kinds the runtime manages."""

    def __init__(self, settings: KubernetesSettings) -> None:
        self.namespace = settings.namespace
        self._timeout = settings.request_timeout_seconds
        self._api = _api_client(settings)
        self._apps = k8s.AppsV1Api(self._api)
        self._core = k8s.CoreV1Api(self._api)
        self._apis: dict[str, Any] = {
            "apps/v1": self._apps,
            "policy/v1": k8s.PolicyV1Api(self._api),
            "v1": self._core,
        }
        self._custom = k8s.CustomObjectsApi(self._api)
        self._streams: set[urllib3.BaseHTTPResponse] = set()
        self._lock = threading.Lock()
        self._aborted = False

    # -- objects --------------------------------------------------------------------------
    def get(self, kind: Kind, name: str) -> Object | None:
        try:
            with _boundary(f"read {kind.kind} {name}"):
                return _json(self._call("read", kind)(name, self.namespace, **self._opts()))
        except NotFound:
            return None

    def list(self, kind: Kind, selector: str) -> tuple[list[Object], str]:
        """Matching objects and the list's resourceVersion (where a watch resumes)."""
        with _boundary(f"list {kind.kind} {selector}"):
            body = _json(
                self._call("list", kind)(self.namespace, label_selector=selector, **self._opts())
            )
        return list(body.get("items") or []), str(body["metadata"].get("resourceVersion", ""))

    def apply(self, manifest: Object, *, field_manager: str) -> Object:
        """Server-side apply of ``manifest`` (created when missing). A
        ``metadata.resourceVersion`` in it is a precondition: :class:`Conflict` when stale."""
        kind = KINDS[manifest["kind"]]
        name = manifest["metadata"]["name"]
        with _boundary(f"apply {kind.kind} {name}"):
            return _json(
                self._call("patch", kind)(
                    name,
                    self.namespace,
                    manifest,
                    field_manager=field_manager,
                    force=True,  # we own these objects; take back fields someone edited
                    _content_type="application/apply-patch+yaml",
                    **self._opts(),
                )
            )

    def create(self, manifest: Object) -> bool:
        """Create ``manifest``; False when an object of that name already exists (it is
        left as it is: create never takes over another writer's object)."""
        kind = KINDS[manifest["kind"]]
        metadata = manifest["metadata"]
        what = f"create {kind.kind} {metadata.get('name') or metadata.get('generateName')}"
        try:
            with _boundary(what):
                # The client serializes a plain dict as it is, like the manifests it applies.
                self._call("create", kind)(self.namespace, manifest, **self._opts())
        except Conflict:
            return False
        return True

    def delete(self, kind: Kind, name: str) -> bool:
        """Ask for deletion (dependents go in the background); False when already gone."""
        try:
            with _boundary(f"delete {kind.kind} {name}"):
                self._call("delete", kind)(
                    name, self.namespace, propagation_policy="Background", **self._opts()
                )
        except NotFound:
            return False
        return True

    def pod_log(self, name: str, container: str, tail: int, *, previous: bool = False) -> str:
        """The container's last ``tail`` lines; ``previous``: of its instance before the
        last restart (:class:`NotFound` when it has none)."""
        try:
            with _boundary(f"read log of pod {name}"):
                response = self._core.read_namespaced_pod_log(
                    name,
                    self.namespace,
                    container=container,
                    tail_lines=tail,
                    limit_bytes=LOG_LIMIT_BYTES,
                    previous=previous,
                    **self._opts(),
                )
        except PermanentRuntimeError as e:
            if previous and "previous terminated container" in e.message:
                raise NotFound(e.reason, e.message) from e
            raise
        return _raw(response).data.decode("utf-8", "replace")

    def follow_log(self, name: str, container: str, tail: int) -> LogStream:
        """The container's last ``tail`` lines, then its output as it comes, until the
        container ends or the stream is closed."""
        with _boundary(f"follow log of pod {name}"):
            response = _raw(
                self._core.read_namespaced_pod_log(
                    name,
                    self.namespace,
                    container=container,
                    tail_lines=tail,
                    follow=True,
                    _preload_content=False,
                    # Connect bounded; reads wait while the container is quiet (a day).
                    _request_timeout=(self._timeout, FOLLOW_READ_TIMEOUT),
                )
            )
        with self._lock:
            self._streams.add(response)
        return LogStream(response, lambda: self._forget(response))

    def _forget(self, response: urllib3.BaseHTTPResponse) -> None:
        with self._lock:
            self._streams.discard(response)

    def pod_cpu(self, selector: str) -> dict[str, float]:
        """Cores each matching pod uses now, from the resource metrics API
        (metrics-server); empty when the cluster has none."""
        try:
            with _boundary(f"list pod metrics {selector}"):
                body = _json(
                    self._custom.list_namespaced_custom_object(
                        "metrics.k8s.io",
                        "v1beta1",
                        self.namespace,
                        "pods",
                        label_selector=selector,
                        **self._opts(),
                    )
                )
        except NotFound:
            return {}
        return {
            item["metadata"]["name"]: sum(
                cpu_quantity(c.get("usage", {}).get("cpu", "0")) for c in item.get("containers", [])
            )
            for item in body.get("items") or []
        }

    # -- watch ----------------------------------------------------------------------------
    def watch(
        self, kind: Kind, selector: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[Object]:
        """Events (``{"type", "object"}``) after ``resource_version`` until the server ends
        the call (after ``timeout_seconds``) or :meth:`abort_streams`. Raises :class:`Gone`
        when that version is too old."""
        what = f"watch {kind.kind} {selector}"
        with _boundary(what):
            response = _raw(
                self._call("list", kind)(
                    self.namespace,
                    label_selector=selector,
                    watch=True,
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=timeout_seconds,
                    _preload_content=False,
                    _request_timeout=(self._timeout, timeout_seconds + self._timeout),
                )
            )
        with self._lock:
            self._streams.add(response)
            if self._aborted:  # closed while this call was connecting
                response.shutdown()
        try:
            with _boundary(what):
                for line in response:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        raise _status_error(what, event.get("object") or {})
                    yield event
        finally:
            with self._lock:
                self._streams.discard(response)
            response.release_conn()

    def abort_streams(self) -> None:
        """End every open watch now and any opened later (their threads see the stream
        end); for shutting down."""
        with self._lock:
            self._aborted = True
            streams = list(self._streams)
        for response in streams:
            # It may have ended on its own meanwhile (connection back in the pool).
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                response.shutdown()

    def close(self) -> None:
        self.abort_streams()
        self._api.close()  # type: ignore[no-untyped-call]

    # -- plumbing -------------------------------------------------------------------------
    def _call(self, verb: str, kind: Kind) -> Any:
        return getattr(self._apis[kind.api_version], f"{verb}_namespaced_{kind.method}")

    def _opts(self) -> dict[str, Any]:
        # Raw JSON instead of the client's models: the runtime works on manifest-shaped dicts.
        return {"_preload_content": False, "_request_timeout": self._timeout}


_CPU_UNITS = {"n": 1e-9, "u": 1e-6, "m": 1e-3}


def cpu_quantity(text: str) -> float:
    """A Kubernetes CPU quantity in cores: ``"250m"`` → 0.25, ``"12345678n"``, ``"2"``."""
    unit = _CPU_UNITS.get(text[-1:])
    return float(text[:-1]) * unit if unit else float(text)


def _api_client(settings: KubernetesSettings) -> k8s.ApiClient:
    in_cluster = settings.in_cluster
    if in_cluster is None:
        in_cluster = settings.kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ
    try:
        if in_cluster:
            configuration = k8s.Configuration()
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return k8s.ApiClient(configuration)
        return cast(
            k8s.ApiClient,
            k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=settings.kubeconfig, context=settings.context
            ),
        )
    except (ConfigException, OSError) as e:
        where = settings.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        source = "in-cluster service account" if in_cluster else f"kubeconfig {where}"
        raise PermanentRuntimeError(
            "KubernetesConfig", f"cannot load the {source}: {_bounded(str(e))}"
        ) from e


def _raw(response: object) -> urllib3.BaseHTTPResponse:
    return cast(urllib3.BaseHTTPResponse, response)


def _json(response: object) -> Object:
    return cast(Object, json.loads(_raw(response).data))


@contextlib.contextmanager
def _boundary(what: str) -> Iterator[None]:
    """Turn the client's and the transport's exceptions into the runtime's."""
    try:
        yield
    except ApiException as e:
        raise _api_error(what, e) from e
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise TemporaryRuntimeError(
            f"kubernetes API unreachable ({what}): {_bounded(str(e))}"
        ) from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:  # a proxy's page, a cut stream
        raise TemporaryRuntimeError(f"kubernetes API ({what}): bad response: {e}") from e


def _api_error(what: str, e: ApiException) -> Exception:
    try:
        status = json.loads(e.body or "")
    except ValueError:
        status = None
    if not isinstance(status, dict):
        status = {"code": e.status, "reason": str(e.reason or "")}
    status.setdefault("code", e.status)
    return _status_error(what, status)


def _status_error(what: str, status: Object) -> Exception:
    """The error for an API ``Status`` (an error response or a watch's ERROR event)."""
    code = int(status.get("code") or 0)
    reason = str(status.get("reason") or "") or f"HTTP{code}"
    message = f"{what}: {_bounded(str(status.get('message') or reason))}"
    if code == 404:
        return NotFound("NotFound", message)
    if code == 409:
        return Conflict(f"{reason}: {message}")
    if code == 410:
        return Gone(f"{reason}: {message}")
    if code in (400, 403, 422):
        return PermanentRuntimeError(reason, message)
    # 401 (a token about to be refreshed), 429, 5xx, 0 (TLS, transport): try again later.
    return TemporaryRuntimeError(f"{code} {reason}: {message}")


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "…"


class SecretStore:
    """Create-only writes of generated Secrets, for ``openeas secrets`` (the chart's
    install hook): a value, once stored, is never replaced. Not the runtime's: it runs
    under its own Role, limited to the Secrets it names."""

    def __init__(self, settings: KubernetesSettings) -> None:
        self.namespace = settings.namespace
        self._timeout = settings.request_timeout_seconds
        self._api = _api_client(settings)
        self._core = k8s.CoreV1Api(self._api)

    def read(self, name: str) -> tuple[dict[str, str], str] | None:
        """The Secret's base64 ``data`` (never decoded here) and resourceVersion, or None
        when it is missing."""
        try:
            with _boundary(f"read Secret {name}"):
                body = _json(
                    self._core.read_namespaced_secret(name, self.namespace, **self._opts())
                )
        except NotFound:
            return None
        return dict(body.get("data") or {}), str(body["metadata"]["resourceVersion"])

    def create(self, name: str, data: dict[str, str], labels: dict[str, str]) -> bool:
        """Create the Secret with ``data`` (base64); False when it already exists."""
        body: Object = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "labels": labels},
            "type": "Opaque",
            "data": data,
        }
        try:
            with _boundary(f"create Secret {name}"):
                # The client's validate_call turns the plain dict into its V1Secret model;
                # its signature asks for the model (hence the ignore).
                self._core.create_namespaced_secret(self.namespace, body, **self._opts())  # type: ignore[arg-type]
        except Conflict:  # 409 AlreadyExists: someone made it first, and it stays theirs
            return False
        return True

    def add(self, name: str, data: dict[str, str], resource_version: str) -> None:
        """Add keys to an existing Secret (a merge patch that names only new keys), if it is
        still at ``resource_version`` (else :class:`Conflict`)."""
        patch = {"metadata": {"resourceVersion": resource_version}, "data": data}
        with _boundary(f"patch Secret {name}"):
            self._core.patch_namespaced_secret(
                name,
                self.namespace,
                patch,
                _content_type="application/merge-patch+json",
                **self._opts(),
            )

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    def _opts(self) -> dict[str, Any]:
        return {"_preload_content": False, "_request_timeout": self._timeout}
