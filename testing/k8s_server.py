"""A Kubernetes API server stand-in over HTTP, for the kubernetes runtime's tests.

No API server can be installed here, so the unmodified ``kubernetes`` client talks to this
one through a kubeconfig (:meth:`ApiStandIn.write_kubeconfig`) on 127.0.0.1, bearer token
required. It is strict where the runtime depends on the real server's behaviour:

* Deployments (``apps/v1``), Services, Pods and Secrets (``v1``), PodDisruptionBudgets
  (``policy/v1``: their validation, not eviction), namespaced: get, list, create,
  replace, patch, delete; ``Status`` error bodies with the real reasons and codes
  (NotFound, AlreadyExists, Conflict, Invalid, BadRequest, Unauthorized, Expired, ...).
* ``resourceVersion``: one counter for all objects, bumped on every change (never on a
  no-op write); a stale ``metadata.resourceVersion`` in an update or patch is a 409.
* Patches: JSON merge patch, strategic merge patch (lists merged by their real merge keys:
  containers, env, ports, volumes, ...), and server-side apply (``fieldManager`` required,
  fields the manager stops applying are removed, conflicts with other writers' fields
  without ``force``).
* Every written object is checked against kubernetes-validate's strict Kubernetes 1.33
  schema (unknown fields are an error, as server-side apply's "field not declared in
  schema"), plus label syntax, name rules, the Deployment's immutable selector matching its
  template, the Service's immutable clusterIP.
* Label selectors: strings (``=``, ``==``, ``!=``, ``in``, ``notin``, exists, ``!``; an
  empty ``in ()`` is a 400) and ``LabelSelector`` objects (``matchLabels`` and/or
  ``matchExpressions`` with In/NotIn/Exists/DoesNotExist, validated; an empty Deployment
  selector is a 422).
* Watch streams (``?watch=true&resourceVersion=``, bookmarks, ``timeoutSeconds``) with an
  ERROR event ``410 Expired`` for versions older than the last compaction; as the real
  watch cache, a change that takes an object out of a watch's label selector arrives as
  DELETED and one that brings it in as ADDED. The pod log subresource.
* Deletion: ``DeleteOptions`` preconditions (``uid``, ``resourceVersion``: 409 Conflict
  "Precondition failed"), ``propagationPolicy`` in the query or the body, and a garbage
  collector: dependents named by ``ownerReferences`` are deleted with their owner
  (Background; Foreground alike, see below) or lose the reference (Orphan). Deleted pods
  only turn terminating (``deletionTimestamp``) until the kubelet (a test) removes them.
* metrics-server's pod metrics (``metrics.k8s.io/v1beta1``, list by label selector), with
  the CPU a test sets (:meth:`set_pod_cpu`); ``metrics_api=False`` answers 404 as a
  cluster without metrics-server does.

Tests drive what controllers and kubelets would do with helpers that change state directly
(not counted as client writes): :meth:`sync_pods` (one step of a crude Deployment controller:
rolling updates surge and wait for readiness by ``maxSurge``/``maxUnavailable``, status
counts ``updatedReplicas`` of the current template),
:meth:`set_pod_status` with the status builders below (ready, pulling, unschedulable,
ImagePullBackOff, init container exit 3, CrashLoopBackOff, OOMKilled), :meth:`remove_pods`,
:meth:`set_log`, :meth:`remove_pod`, :meth:`wait_for_change` (for a kubelet beside it:
``testing/kubelet.py``), :meth:`expire_watches` (compaction), fault injection (:meth:`fail_next`,
:meth:`touch_before_next_write`); :attr:`writes` lists the clients' successful write
requests (no-op writes included) and :attr:`requests` every request.

Not modeled: controllers that run by themselves (no ReplicaSets: pods are owned by their
Deployment directly; no scheduler or kubelet: pods exist and change only when a test makes
them; rollouts advance only when a test calls :meth:`sync_pods`, with no
``progressDeadlineSeconds``, ``minReadySeconds``, pausing or rollback; scale-down removes
pods at once), finalizers (so Foreground deletion does not hold the owner until its
dependents are gone, and the garbage collector runs synchronously within the DELETE),
field selectors, pagination (``limit``/``continue``), JSON patch
(``application/json-patch+json``), strategic-merge directives (``$patch``,
``$setElementOrder``, ...: rejected), managedFields in responses (ownership is tracked per
leaf field, lists as a whole), admission (quotas, webhooks, defaults beyond a few shown
below), cluster-scoped resources other than discovery, RBAC (one token may do
everything), protobuf/CBOR, TLS, ``dryRun``, server-side ``fieldValidation`` modes (always
strict), Events beyond storing and listing them, and the status subresource of a
Deployment as a client would write it.
"""

from __future__ import annotations

import builtins
import copy
import functools
import hashlib
import importlib.resources
import itertools
import json
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import referencing
import yaml

from contract.merge import merge_patch as contract_merge_patch

Obj = dict[str, Any]
SCHEMA_VERSION = "1.33"
TOKEN = "openeas-standin-token"
_MISSING = object()


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group_version: str  # "v1", "apps/v1" or "policy/v1"
    name_rule: str  # "subdomain" (DNS-1123) or "label" (DNS-1035)


RESOURCES = {
    ("apps/v1", "deployments"): Resource("deployments", "Deployment", "apps/v1", "subdomain"),
    ("v1", "services"): Resource("services", "Service", "v1", "label"),
    ("v1", "pods"): Resource("pods", "Pod", "v1", "subdomain"),
    ("v1", "secrets"): Resource("secrets", "Secret", "v1", "subdomain"),
    ("v1", "configmaps"): Resource("configmaps", "ConfigMap", "v1", "subdomain"),
    ("v1", "events"): Resource("events", "Event", "v1", "subdomain"),
    ("policy/v1", "poddisruptionbudgets"): Resource(
        "poddisruptionbudgets", "PodDisruptionBudget", "policy/v1", "subdomain"
    ),
}
# Strategic merge keys of the lists the runtime's objects hold (k8s.io/api patchMergeKey).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "conditions": "type",
}
PORT_MERGE_KEYS = {"Service": "port", "default": "containerPort"}

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


@dataclass
class _Fault:
    method: str
    plural: str
    code: int
    times: int


@dataclass
class _Event:
    rv: int
    plural: str
    namespace: str
    type: str
    obj: Obj
    prev: Obj | None = None  # the object before a MODIFIED: a selector may stop matching

    def seen_through(self, match: Callable[[Obj], bool]) -> Obj | None:
        """The event as a watch with this selector gets it, like the API server's watch
        cache: a change that makes an object leave the selection is DELETED, one that makes
        it enter is ADDED; None when the object is outside before and after."""
        now = match(self.obj)
        before = match(self.prev) if self.type == "MODIFIED" and self.prev else now
        if not now and not before:
            return None
        kind = self.type
        if self.type == "MODIFIED" and now != before:
            kind = "ADDED" if now else "DELETED"
        return {"type": kind, "object": copy.deepcopy(self.obj)}


@dataclass
class ApiStandIn:
    namespaces: tuple[str, ...] = ("openeas-serving",)
    token: str = TOKEN
    writes: list[tuple[str, str, str]] = field(default_factory=list)  # (verb, plural, name)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path?query)
    metrics_api: bool = True  # serve metrics.k8s.io pod metrics, as metrics-server does

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._events: list[_Event] = []
        self._rv = 1000
        self._compacted = 0  # watches from a version <= this get 410
        self._epoch = 0  # bumped to end every open watch stream
        self._owners: dict[tuple[str, str, str], dict[tuple[str, ...], str]] = {}
        self._applied: dict[tuple[str, str, str, str], Obj] = {}
        self._faults: list[_Fault] = []
        self._touch: dict[tuple[str, str], int] = {}
        self._logs: dict[tuple[str, str], str] = {}
        self._previous_logs: dict[tuple[str, str], str] = {}  # before a container's restart
        self._pod_cpu: dict[tuple[str, str], str] = {}  # (ns, pod) → CPU quantity
        self._ips = itertools.count(10)
        self._server: ThreadingHTTPServer | None = None
        self._closing = False

    # -- life cycle -----------------------------------------------------------------------
    def start(self) -> ApiStandIn:
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def write_kubeconfig(self, path: Path, namespace: str | None = None) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "standin",
                    "context": {
                        "cluster": "standin",
                        "user": "tester",
                        "namespace": namespace or self.namespaces[0],
                    },
                }
            ],
            "current-context": "standin",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- test-side inspection and control ---------------------------------------------------
    def get(self, plural: str, name: str, namespace: str | None = None) -> Obj | None:
        with self._cond:
            obj = self._objects.get((plural, namespace or self.namespaces[0], name))
            return copy.deepcopy(obj) if obj else None

    def list(self, plural: str, namespace: str | None = None) -> list[Obj]:
        ns = namespace or self.namespaces[0]
        with self._cond:
            return [
                copy.deepcopy(o)
                for (p, n, _), o in sorted(self._objects.items())
                if (p, n) == (plural, ns)
            ]

    def write_count(self) -> int:
        return len(self.writes)

    def fail_next(self, method: str, plural: str, code: int, times: int = 1) -> None:
        """The next ``times`` ``method`` requests on ``plural`` answer ``code``."""
        with self._cond:
            self._faults.append(_Fault(method.upper(), plural, code, times))

    def touch_before_next_write(self, plural: str, name: str, times: int = 1) -> None:
        """Another writer changes the object just before each of the next ``times`` client
        writes to it, so a write based on an earlier read meets a newer resourceVersion."""
        with self._cond:
            self._touch[(plural, name)] = times

    def expire_watches(self, change: Callable[[], None] | None = None) -> None:
        """End every open watch, run ``change`` (unseen by those watches), then compact
        history, so a watch resuming from any version seen so far gets 410 Expired."""
        with self._cond:
            self._epoch += 1
            self._cond.notify_all()
            if change is not None:
                change()
            self._compacted = self._rv

    def sync_pods(self, deployment: str, namespace: str | None = None) -> builtins.list[str]:
        """One step of a crude Deployment + ReplicaSet controller; returns the names of the
        pods of the current template.

        As many current-template pods as ``replicas`` are wanted. A template change rolls
        out by the Deployment's RollingUpdate strategy (``maxSurge``/``maxUnavailable``,
        numbers or percentages, 25% by default): new pods are created up to
        ``replicas + maxSurge`` in all, and old ones removed only while the ready pods stay
        at least ``replicas - maxUnavailable`` (not-ready old pods go first). So a rollout
        takes several steps, with readiness (:meth:`set_pod_status`) in between; call
        until it settles. ``Recreate`` removes every old pod first. New pods are Pending and
        owned by the Deployment (``ownerReferences``; the real owner is a ReplicaSet)."""
        ns = namespace or self.namespaces[0]
        with self._cond:
            dep = self._objects[("deployments", ns, deployment)]
            template = dep["spec"]["template"]
            suffix = _short_hash(template)
            wanted = int(dep["spec"].get("replicas", 1))
            pods = {
                name: pod
                for (p, n, name), pod in self._objects.items()
                if (p, n) == ("pods", ns) and _selects(dep["spec"]["selector"], pod)
            }
            current = sorted(name for name in pods if f"-{suffix}-" in name)
            old = sorted(set(pods) - set(current), key=lambda n: (_pod_ready(pods[n]), n))
            for name in current[wanted:]:  # scaled down
                self._remove(("pods", ns, name))
            current = current[:wanted]
            surge, unavailable = _rollout_bounds(dep["spec"], wanted)
            ready = sum(_pod_ready(pods[n]) for n in current + old)
            kept = []
            for name in old:
                if _pod_ready(pods[name]):
                    if ready - 1 < wanted - unavailable:
                        kept.append(name)  # it still serves: the floor of ready pods
                        continue
                    ready -= 1
                self._remove(("pods", ns, name))
            old = kept
            for i in itertools.count():
                if len(current) >= wanted or len(current) + len(old) >= wanted + surge:
                    break
                name = f"{deployment}-{suffix}-{i:05d}"
                if name in current:
                    continue
                self._store("pods", ns, self._new_pod(dep, name), created=True)
                current.append(name)
            self._deployment_status(dep)
            return sorted(current)

    @staticmethod
    def _new_pod(dep: Obj, name: str) -> Obj:
        meta = dep["metadata"]
        template = dep["spec"]["template"]
        owner = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": dict(template["metadata"]["labels"]),
                "ownerReferences": [owner],
            },
            "spec": copy.deepcopy(template["spec"]),
            "status": {"phase": "Pending"},
        }

    def set_pod_status(self, name: str, status: Obj, namespace: str | None = None) -> None:
        ns = namespace or self.namespaces[0]
        with self._cond:
            pod = copy.deepcopy(self._objects[("pods", ns, name)])
            pod["status"] = status
            if status.get("phase") == "Running" and "podIP" not in status:
                status["podIP"] = f"10.244.0.{next(self._ips)}"
            self._store("pods", ns, pod)
            for (p, n, _), dep in list(self._objects.items()):
                if (p, n) == ("deployments", ns) and _selects(dep["spec"]["selector"], pod):
                    self._deployment_status(dep)

    def remove_pods(self, label_selector: str = "", namespace: str | None = None) -> None:
        """The kubelet finished and the garbage collector came by: matching pods vanish."""
        ns = namespace or self.namespaces[0]
        match = parse_selector(label_selector)
        with self._cond:
            for key, pod in list(self._objects.items()):
                if key[:2] == ("pods", ns) and match(pod):
                    self._remove(key)

    def remove_pod(self, name: str, namespace: str | None = None) -> bool:
        """The kubelet finished a terminating pod: it vanishes. False if it was gone."""
        with self._cond:
            key = ("pods", namespace or self.namespaces[0], name)
            if key not in self._objects:
                return False
            self._remove(key)
            return True

    def set_log(self, pod: str, container: str, text: str) -> None:
        with self._cond:
            self._logs[(pod, container)] = text

    def append_log(self, pod: str, container: str, line: str) -> None:
        with self._cond:
            self._logs[(pod, container)] = self._logs.get((pod, container), "") + line + "\n"
            self._cond.notify_all()  # followers

    def set_previous_log(self, pod: str, container: str, text: str) -> None:
        """The output of the container's instance before its last restart."""
        with self._cond:
            self._previous_logs[(pod, container)] = text

    def follow_log(self, path: str, query: dict[str, str]) -> Iterator[str]:
        """``follow=true``: the log as :meth:`handle` gives it, then each text appended,
        until the pod is gone or the stand-in stops. Raises ApiError before the first
        chunk as the plain read does."""
        _, ns, name, _ = _route(path)
        with self._cond:
            text = self._log(ns, name, query)
            container = query.get("container") or ""
            sent = len(self._logs.get((name or "", container), ""))
        yield text
        while True:
            with self._cond:
                while True:
                    now = self._logs.get((name or "", container), "")
                    gone = (("pods", ns, name or "") not in self._objects) or self._closing
                    if len(now) > sent or gone:
                        break
                    self._cond.wait(0.5)
            if len(now) > sent:
                yield now[sent:]
                sent = len(now)
            if gone:
                return

    def wait_for_change(self, version: int, timeout: float) -> int:
        """Block until an object changes after ``version`` (a :attr:`version` read before),
        the stand-in stops, or ``timeout`` passes; the version now. For a kubelet or a
        controller living beside it, as watches serve a client."""
        with self._cond:
            self._cond.wait_for(lambda: self._rv != version or self._closing, timeout)
            return self._rv

    @property
    def version(self) -> int:
        with self._cond:
            return self._rv

    def set_pod_cpu(self, pod: str, quantity: str, namespace: str | None = None) -> None:
        """What metrics-server would report for the pod's container, e.g. ``"250m"``."""
        with self._cond:
            self._pod_cpu[(namespace or self.namespaces[0], pod)] = quantity

    def _pod_metrics(self, ns: str, query: dict[str, str]) -> Obj:
        if not self.metrics_api:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        _reject_unmodeled(query)
        match = parse_selector(query.get("labelSelector", ""))
        items = [
            {
                "metadata": {"name": name, "namespace": ns, "labels": pod["metadata"]["labels"]},
                "timestamp": _now(),
                "window": "15s",
                "containers": [{"name": "triton", "usage": {"cpu": cpu, "memory": "0"}}],
            }
            for (p, n, name), pod in sorted(self._objects.items())
            if (p, n) == ("pods", ns) and match(pod) and (cpu := self._pod_cpu.get((ns, name)))
        ]
        return {
            "kind": "PodMetricsList",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": items,
        }

    # -- store --------------------------------------------------------------------------
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _store(self, plural: str, ns: str, obj: Obj, *, created: bool = False) -> Obj:
        meta = obj["metadata"]
        if created:
            meta.update(
                uid=str(uuid.uuid4()),
                creationTimestamp=_now(),
                namespace=ns,
            )
            if plural == "deployments":
                meta["generation"] = 1
        meta["resourceVersion"] = self._next_rv()
        prev = self._objects.get((plural, ns, meta["name"]))
        self._objects[(plural, ns, meta["name"])] = obj
        self._record("ADDED" if created else "MODIFIED", plural, ns, obj, prev)
        return obj

    def _remove(self, key: tuple[str, str, str]) -> Obj:
        obj = self._objects.pop(key)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._owners.pop(key, None)
        for applied in [k for k in self._applied if k[:3] == key]:
            del self._applied[applied]
        self._record("DELETED", key[0], key[1], obj)
        return obj

    def _record(self, kind: str, plural: str, ns: str, obj: Obj, prev: Obj | None = None) -> None:
        self._events.append(
            _Event(self._rv, plural, ns, kind, copy.deepcopy(obj), copy.deepcopy(prev))
        )
        self._cond.notify_all()

    def _deployment_status(self, dep: Obj) -> None:
        ns = dep["metadata"]["namespace"]
        pods = [
            p
            for (kind, n, _), p in self._objects.items()
            if (kind, n) == ("pods", ns) and _selects(dep["spec"]["selector"], p)
        ]
        ready = sum(1 for p in pods if _pod_ready(p))
        suffix = _short_hash(dep["spec"]["template"])
        updated = sum(1 for p in pods if f"-{suffix}-" in p["metadata"]["name"])
        status = {
            "observedGeneration": dep["metadata"].get("generation", 1),
            "replicas": len(pods),
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        if len(pods) > ready:
            status["unavailableReplicas"] = len(pods) - ready
        if dep.get("status") != status:
            dep = copy.deepcopy(dep)
            dep["status"] = status
            self._store("deployments", ns, dep)

    # -- request handling (called by the handler, under no lock) ------------------------------
    def handle(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> tuple[int, Any, str]:
        """(status, body, content type) for one non-watch request; raises ApiError."""
        if path in DISCOVERY:
            return 200, DISCOVERY[path], "application/json"
        metrics = re.fullmatch(r"/apis/metrics\.k8s\.io/v1beta1/namespaces/([^/]+)/pods/?", path)
        if metrics and method == "GET":
            with self._cond:
                return 200, self._pod_metrics(metrics.group(1), query), "application/json"
        resource, ns, name, sub = _route(path)
        with self._cond:
            self._inject_fault(method, resource.plural)
            if ns not in self.namespaces and method in ("POST", "PUT", "PATCH"):
                raise ApiError(
                    404, "NotFound", f'namespaces "{ns}" not found', name=ns, kind="namespaces"
                )
            if sub == "log":
                return 200, self._log(ns, name, query), "text/plain"
            if sub is not None:
                raise ApiError(
                    404, "NotFound", f"the server could not find the requested resource ({sub})"
                )
            if method == "GET":
                if name is None:
                    return 200, self._list_body(resource, ns, query), "application/json"
                return 200, copy.deepcopy(self._existing(resource, ns, name)), "application/json"
            if method == "POST" and name is None:
                result = self._create(resource, ns, _json_object(body), query)
                self.writes.append(("create", resource.plural, result["metadata"]["name"]))
                return 201, result, "application/json"
            if name is None:
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            if method == "PUT":
                result = self._update(resource, ns, name, _json_object(body), query)
                self.writes.append(("update", resource.plural, name))
                return 200, result, "application/json"
            if method == "PATCH":
                result = self._patch(resource, ns, name, body, headers, query)
                self.writes.append(("patch", resource.plural, name))
                return 200, result, "application/json"
            if method == "DELETE":
                result = self._delete(resource, ns, name, query, body)
                self.writes.append(("delete", resource.plural, name))
                return 200, result, "application/json"
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    def _inject_fault(self, method: str, plural: str) -> None:
        for fault in self._faults:
            if fault.method == method and fault.plural == plural and fault.times > 0:
                fault.times -= 1
                reason = {403: "Forbidden", 429: "TooManyRequests", 500: "InternalError"}.get(
                    fault.code, "InternalError"
                )
                raise ApiError(
                    fault.code, reason, f"injected fault: {method} {plural} answered {fault.code}"
                )

    def _existing(self, resource: Resource, ns: str, name: str) -> Obj:
        obj = self._objects.get((resource.plural, ns, name))
        if obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'{resource.plural}.{_group(resource)} "{name}" not found',
                name=name,
                kind=resource.plural,
            )
        return obj

    def _list_body(self, resource: Resource, ns: str, query: dict[str, str]) -> Obj:
        _reject_unmodeled(query)
        match = parse_selector(query.get("labelSelector", ""))
        items = [
            copy.deepcopy(o)
            for (p, n, _), o in sorted(self._objects.items())
            if (p, n) == (resource.plural, ns) and match(o)
        ]
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.group_version,
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _create(self, resource: Resource, ns: str, obj: Obj, query: dict[str, str]) -> Obj:
        self._check_body(resource, ns, obj)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise ApiError(
                500, "InternalError", "resourceVersion should not be set on objects to be created"
            )
        if not meta.get("name"):  # generateName: the server adds five random characters
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key = (resource.plural, ns, meta["name"])
        if key in self._objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{resource.plural}.{_group(resource)} "{meta["name"]}" already exists',
                name=meta["name"],
                kind=resource.plural,
            )
        obj.pop("status", None)
        _default(resource, obj, None)
        self._validate(resource, obj, None)
        stored = self._store(resource.plural, ns, obj, created=True)
        self._owners[key] = {p: query.get("fieldManager", "unknown") for p in _leaves(_owned(obj))}
        return copy.deepcopy(stored)

    def _update(
        self, resource: Resource, ns: str, name: str, obj: Obj, query: dict[str, str]
    ) -> Obj:
        live = self._existing(resource, ns, name)
        self._check_body(resource, ns, obj, name)
        wanted = obj["metadata"].get("resourceVersion")
        if wanted and wanted != live["metadata"]["resourceVersion"]:
            raise _conflict(resource, name)
        return self._commit(resource, ns, live, obj, query.get("fieldManager", "unknown"))

    def _commit(self, resource: Resource, ns: str, live: Obj, new: Obj, manager: str | None) -> Obj:
        """Store ``new`` in place of ``live``: server-owned fields kept, status untouched
        (the main resource ignores it), no change when nothing changed."""
        new = copy.deepcopy(new)
        for kept in (
            "uid",
            "creationTimestamp",
            "namespace",
            "name",
            "generation",
            "resourceVersion",
        ):
            if kept in live["metadata"]:
                new["metadata"][kept] = live["metadata"][kept]
            else:
                new["metadata"].pop(kept, None)
        if "status" in live:
            new["status"] = copy.deepcopy(live["status"])
        else:
            new.pop("status", None)
        _default(resource, new, live)
        if new == live:
            return copy.deepcopy(live)
        self._validate(resource, new, live)
        if resource.plural == "deployments" and new.get("spec") != live.get("spec"):
            new["metadata"]["generation"] = live["metadata"].get("generation", 1) + 1
        key = (resource.plural, ns, live["metadata"]["name"])
        if manager is not None:
            owners = self._owners.setdefault(key, {})
            before = _leaves(_owned(live))
            for path, value in _leaves(_owned(new)).items():
                if before.get(path, _MISSING) != value:
                    owners[path] = manager
        return copy.deepcopy(self._store(resource.plural, ns, new))

    def _patch(
        self,
        resource: Resource,
        ns: str,
        name: str,
        body: bytes,
        headers: Any,
        query: dict[str, str],
    ) -> Obj:
        content_type = (headers.get("Content-Type") or "").split(";")[0].strip()
        if self._touch.get((resource.plural, name), 0) > 0:
            self._touch[(resource.plural, name)] -= 1
            self._touched_by_someone_else(resource, ns, name)
        if content_type == "application/apply-patch+yaml":
            return self._apply(resource, ns, name, body, query)
        if content_type not in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/merge-patch+json, application/strategic-merge-patch+json, "
                f"application/apply-patch+yaml (stand-in: {content_type or 'none'} not modeled)",
            )
        patch = _json_object(body)
        live = self._existing(resource, ns, name)
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != live["metadata"]["resourceVersion"]:
            raise _conflict(resource, name)
        if content_type == "application/merge-patch+json":
            merged = merge_patch(live, patch)
        else:
            merged = strategic_merge(live, patch, resource.kind)
        return self._commit(resource, ns, live, merged, query.get("fieldManager", "unknown"))

    def _apply(
        self, resource: Resource, ns: str, name: str, body: bytes, query: dict[str, str]
    ) -> Obj:
        manager = query.get("fieldManager", "")
        if not manager:
            raise ApiError(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch",
            )
        try:
            applied = yaml.safe_load(body)
        except yaml.YAMLError as e:
            raise ApiError(400, "BadRequest", f"error decoding YAML: {e}") from None
        if not isinstance(applied, dict):
            raise ApiError(400, "BadRequest", "apply patch must be an object")
        self._check_body(resource, ns, applied, name)
        key = (resource.plural, ns, name)
        live = self._objects.get(key)
        wanted = applied["metadata"].pop("resourceVersion", None)
        if live is None:
            if wanted:
                raise ApiError(
                    409,
                    "Conflict",
                    f"Operation cannot be fulfilled on {resource.plural}.{_group(resource)} "
                    f'"{name}": the object has been deleted or does not exist',
                )
            created = self._create(resource, ns, copy.deepcopy(applied), {"fieldManager": manager})
            self._owners[key] = {p: manager for p in _leaves(_owned(applied))}
            self._applied[(*key, manager)] = applied
            return created
        if wanted and wanted != live["metadata"]["resourceVersion"]:
            raise _conflict(resource, name)
        owners = self._owners.setdefault(key, {})
        new_leaves = _leaves(_owned(applied))
        if query.get("force") != "true":
            clashes = sorted(
                p
                for p, v in new_leaves.items()
                if owners.get(p, manager) != manager and _get(live, p) != v
            )
            if clashes:
                fields = ", ".join(
                    "." + ".".join(p) + f' (owned by "{owners[p]}")' for p in clashes
                )
                raise ApiError(
                    409, "Conflict", f"Apply failed with {len(clashes)} conflict(s): {fields}"
                )
        result = copy.deepcopy(live)
        previous = self._applied.get((*key, manager), {})
        for path in _leaves(_owned(previous)):
            if path not in new_leaves and owners.get(path) == manager:
                _remove_path(result, path)
                owners.pop(path, None)
        result = _apply_merge(result, applied)
        stored = self._commit(resource, ns, live, result, None)
        for path in new_leaves:
            owners[path] = manager
        self._applied[(*key, manager)] = applied
        return stored

    def _touched_by_someone_else(self, resource: Resource, ns: str, name: str) -> None:
        live = self._existing(resource, ns, name)
        other = copy.deepcopy(live)
        other["metadata"].setdefault("annotations", {})["example.com/touched"] = str(self._rv)
        self._commit(resource, ns, live, other, "someone-else")

    def _delete(
        self, resource: Resource, ns: str, name: str, query: dict[str, str], body: bytes
    ) -> Obj:
        options = _json_object(body) if body.strip() else {}
        policy = query.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise ApiError(400, "BadRequest", f'propagationPolicy "{policy}" is not supported')
        live = self._existing(resource, ns, name)
        self._check_preconditions(resource, live, options.get("preconditions") or {})
        if resource.plural == "pods":  # graceful: the kubelet (a test) finishes it
            return copy.deepcopy(self._terminate(ns, live))
        removed = self._remove((resource.plural, ns, name))
        self._collect_garbage(ns, removed["metadata"]["uid"], orphan=policy == "Orphan")
        return copy.deepcopy(removed)

    def _check_preconditions(self, resource: Resource, live: Obj, wanted: Obj) -> None:
        meta = live["metadata"]
        for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            if wanted.get(field_name) and wanted[field_name] != meta[field_name]:
                raise ApiError(
                    409,
                    "Conflict",
                    f"Operation cannot be fulfilled on {resource.plural}.{_group(resource)} "
                    f'"{meta["name"]}": Precondition failed: {label} in precondition: '
                    f"{wanted[field_name]}, {label} in object meta: {meta[field_name]}",
                    name=meta["name"],
                    kind=resource.plural,
                )

    def _terminate(self, ns: str, pod: Obj) -> Obj:
        """A pod deletion: marked terminating; the kubelet (a test) removes it later."""
        if pod["metadata"].get("deletionTimestamp"):
            return pod
        pod = copy.deepcopy(pod)
        pod["metadata"]["deletionTimestamp"] = _now()
        pod["metadata"]["deletionGracePeriodSeconds"] = 30
        return self._store("pods", ns, pod)

    def _collect_garbage(self, ns: str, owner_uid: str, *, orphan: bool) -> None:
        """The garbage collector, at once: dependents of a deleted owner (by
        ownerReferences) are deleted too, or with ``Orphan`` only lose the reference."""
        for (plural, n, _), obj in list(self._objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if n != ns or not any(r.get("uid") == owner_uid for r in refs):
                continue
            if orphan:
                kept = copy.deepcopy(obj)
                kept["metadata"]["ownerReferences"] = [r for r in refs if r["uid"] != owner_uid]
                if not kept["metadata"]["ownerReferences"]:
                    del kept["metadata"]["ownerReferences"]
                self._store(plural, ns, kept)
            elif plural == "pods":
                self._terminate(ns, obj)
            else:
                self._remove((plural, ns, obj["metadata"]["name"]))

    def _log(self, ns: str, name: str | None, query: dict[str, str]) -> str:
        pod = self._existing(RESOURCES[("v1", "pods")], ns, name or "")
        spec = pod["spec"]
        names = [c["name"] for c in spec.get("containers", [])]
        init = [c["name"] for c in spec.get("initContainers", [])]
        container = query.get("container")
        if container is None:
            if len(names) != 1:
                raise ApiError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: {names}",
                )
            container = names[0]
        if container not in names + init:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        statuses = (pod.get("status") or {}).get("initContainerStatuses", []) + (
            pod.get("status") or {}
        ).get("containerStatuses", [])
        mine = next((s for s in statuses if s.get("name") == container), None)
        if mine is None or ("waiting" in (mine.get("state") or {}) and not mine.get("lastState")):
            reason = (
                ((mine or {}).get("state") or {})
                .get("waiting", {})
                .get("reason", "ContainerCreating")
            )
            raise ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{name}" is waiting to start: {reason}',
            )
        logs = self._previous_logs if query.get("previous") == "true" else self._logs
        if logs is self._previous_logs and (name or "", container) not in logs:
            raise ApiError(
                400,
                "BadRequest",
                f'previous terminated container "{container}" in pod "{name}" not found',
            )
        lines = logs.get((name or "", container), "").splitlines(keepends=True)
        if "tailLines" in query:
            lines = lines[-int(query["tailLines"]) :] if int(query["tailLines"]) else []
        text = "".join(lines)
        if "limitBytes" in query:
            text = text.encode()[: int(query["limitBytes"])].decode(errors="ignore")
        return text

    def _check_body(self, resource: Resource, ns: str, obj: Obj, name: str | None = None) -> None:
        if obj.get("apiVersion") != resource.group_version or obj.get("kind") != resource.kind:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({obj.get('apiVersion')}) does not match the "
                f"expected API version ({resource.group_version}) or kind {obj.get('kind')} "
                f"is not {resource.kind}",
            )
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            raise ApiError(
                422,
                "Invalid",
                f"{resource.kind} is invalid: metadata.name: Required value: "
                "name or generateName is required",
            )
        if meta.get("namespace", ns) != ns:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent "
                "on the request",
            )
        if name is not None and meta["name"] != name:
            raise ApiError(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )

    def _validate(self, resource: Resource, obj: Obj, live: Obj | None) -> None:
        """422 Invalid for what the real server's validation rejects (the parts modeled)."""
        meta = obj["metadata"]
        problems: list[str] = []
        rule = _SUBDOMAIN if resource.name_rule == "subdomain" else _DNS_LABEL
        if not rule.match(meta["name"]) or len(meta["name"]) > (
            253 if resource.name_rule == "subdomain" else 63
        ):
            problems.append(
                f"metadata.name: Invalid value: {meta['name']!r}: must be a lowercase RFC 1123 name"
            )
        for where, labels in (
            ("metadata.labels", meta.get("labels")),
            (
                "spec.template.metadata.labels",
                ((obj.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels"),
            ),
        ):
            for k, v in (labels or {}).items():
                if not _label_key_ok(k):
                    problems.append(
                        f"{where}: Invalid value: {k!r}: name part must consist of "
                        "alphanumeric characters, '-', '_' or '.'"
                    )
                if len(v) > 63 or not _LABEL_VALUE.match(v):
                    problems.append(
                        f"{where}: Invalid value: {v!r}: a valid label must be an empty "
                        "string or consist of alphanumeric characters, '-', '_' or '.', and "
                        "must start and end with an alphanumeric character"
                    )
        if resource.kind == "Deployment":
            spec = obj["spec"]
            selector = spec.get("selector") or {}
            problems += _selector_problems(selector, "spec.selector")
            if not selector.get("matchLabels") and not selector.get("matchExpressions"):
                problems.append(
                    "spec.selector: Invalid value: {}: empty selector is invalid for deployment"
                )
            elif not _selects(selector, spec["template"]):
                problems.append(
                    "spec.template.metadata.labels: Invalid value: "
                    "`selector` does not match template `labels`"
                )
            if live is not None and selector != live["spec"].get("selector"):
                problems.append("spec.selector: Invalid value: field is immutable")
        if resource.kind == "PodDisruptionBudget":
            problems += _disruption_budget_problems(obj["spec"])
        ip = (obj.get("spec") or {}).get("clusterIP")
        if resource.kind == "Service" and live is not None and ip != live["spec"].get("clusterIP"):
            problems.append("spec.clusterIP: Invalid value: field is immutable")
        schema_problem = _schema_problem(obj)
        if schema_problem:
            problems.append(schema_problem)
        if problems:
            raise ApiError(
                422,
                "Invalid",
                f'{resource.kind} "{meta["name"]}" is invalid: ' + "; ".join(problems),
                name=meta["name"],
                kind=resource.kind,
            )

    # -- watch ----------------------------------------------------------------------------
    def watch(self, path: str, query: dict[str, str]) -> Iterator[Obj]:
        """Watch events for a list path, ending at ``timeoutSeconds``, at
        :meth:`expire_watches`, or when the server stops. Bad requests raise ApiError here,
        before the stream starts."""
        resource, ns, name, sub = _route(path)
        if name is not None or sub is not None:
            raise ApiError(405, "MethodNotAllowed", "watch is modeled on collections only")
        _reject_unmodeled(query)
        match = parse_selector(query.get("labelSelector", ""))
        start = query.get("resourceVersion", "")
        if start not in ("", "0") and not start.isdigit():
            raise ApiError(400, "BadRequest", f"invalid resource version: {start}")
        return self._events_after(resource, ns, match, start, query)

    def _events_after(
        self,
        resource: Resource,
        ns: str,
        match: Callable[[Obj], bool],
        start: str,
        query: dict[str, str],
    ) -> Iterator[Obj]:
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        with self._cond:
            epoch = self._epoch
            initial: list[Obj] = []
            if start in ("", "0"):  # "get state and start at most recent"
                sent = self._rv
                initial = [
                    {"type": "ADDED", "object": copy.deepcopy(obj)}
                    for (p, n, _), obj in sorted(self._objects.items())
                    if (p, n) == (resource.plural, ns) and match(obj)
                ]
            else:
                sent = int(start)
                if sent < self._compacted:
                    message = f"too old resource version: {sent} ({self._compacted})"
                    initial = [{"type": "ERROR", "object": status_body(410, "Expired", message)}]
                    sent = -1
        yield from initial
        if sent < 0:
            return
        while True:
            with self._cond:
                pending = [e for e in self._events if e.rv > sent]
                while (
                    not pending
                    and epoch == self._epoch
                    and not self._closing
                    and time.monotonic() < deadline
                ):
                    self._cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                    pending = [e for e in self._events if e.rv > sent]
                if epoch != self._epoch or self._closing:
                    return
                if not pending:
                    if bookmarks:
                        yield _bookmark(resource, self._rv)
                    return
                sent = pending[-1].rv
                seen = (
                    e.seen_through(match)
                    for e in pending
                    if (e.plural, e.namespace) == (resource.plural, ns)
                )
                batch = [event for event in seen if event is not None]
            yield from batch


def _bookmark(resource: Resource, rv: int) -> Obj:
    return {
        "type": "BOOKMARK",
        "object": {
            "kind": resource.kind,
            "apiVersion": resource.group_version,
            "metadata": {"resourceVersion": str(rv)},
        },
    }


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
        # else: a client that died mid-request (a control plane SIGKILLed): nothing to say


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    api: ApiStandIn

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.api.requests.append((method, self.path))
        try:
            if self.headers.get("Authorization") != f"Bearer {self.api.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if method == "GET" and query.get("watch") in ("true", "1"):
                self._stream(self.api.watch(parts.path, query))
                return
            if method == "GET" and parts.path.endswith("/log") and query.get("follow") == "true":
                chunks = self.api.follow_log(parts.path, query)
                first = next(chunks)  # errors before the stream starts are answered as such
                self._stream_text(first, chunks)
                return
            code, payload, content_type = self.api.handle(
                method, parts.path, query, self.headers, body
            )
        except ApiError as e:
            code, payload, content_type = e.code, e.status(), "application/json"
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream_text(self, first: str, rest: Iterator[str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for text in itertools.chain([first], rest):
                data = text.encode()
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away
            pass

    def _stream(self, events: Iterator[Obj]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")  # an aborted stream leaves nothing to reuse
        self.end_headers()
        self.close_connection = True
        try:
            self.wfile.flush()
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away (an aborted watch)
            pass


# -- discovery --------------------------------------------------------------------------------
def _resource_list(group_version: str) -> Obj:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {
                "name": r.plural,
                "singularName": r.kind.lower(),
                "namespaced": True,
                "kind": r.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
            for (gv, _), r in RESOURCES.items()
            if gv == group_version
        ],
    }


DISCOVERY: dict[str, Obj] = {
    "/version": {
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-openeas-standin",
        "platform": "linux/amd64",
    },
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "apps",
                "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"},
            },
            {
                "name": "policy",
                "versions": [{"groupVersion": "policy/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "policy/v1", "version": "v1"},
            },
        ],
    },
    "/api/v1": _resource_list("v1"),
    "/apis/apps/v1": _resource_list("apps/v1"),
    "/apis/policy/v1": _resource_list("policy/v1"),
}


def _route(path: str) -> tuple[Resource, str, str | None, str | None]:
    m = re.fullmatch(
        r"/(?:api/(v1)|apis/(apps/v1|policy/v1))/namespaces/([^/]+)/([^/]+)"
        r"(?:/([^/]+))?(?:/([^/]+))?/?",
        path,
    )
    if not m:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    group_version = m.group(1) or m.group(2)
    resource = RESOURCES.get((group_version, m.group(4)))
    if resource is None:
        raise ApiError(
            404,
            "NotFound",
            f"the server could not find the requested resource ({m.group(4)}; not modeled)",
        )
    return resource, m.group(3), m.group(5), m.group(6)


def _reject_unmodeled(query: dict[str, str]) -> None:
    for param in ("fieldSelector", "limit", "continue"):
        if query.get(param):
            raise ApiError(400, "BadRequest", f"{param} is not modeled by the stand-in")


def _json_object(body: bytes) -> Obj:
    try:
        value = json.loads(body or b"null")
    except ValueError as e:
        raise ApiError(400, "BadRequest", f"error decoding request body: {e}") from None
    if not isinstance(value, dict):
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    return value


def _conflict(resource: Resource, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource.plural}.{_group(resource)} "{name}": '
        "the object has been modified; please apply your changes to the latest version and "
        "try again",
        name=name,
        kind=resource.plural,
    )


def _group(resource: Resource) -> str:
    return resource.group_version.split("/")[0] if "/" in resource.group_version else ""


# -- defaults and schema -------------------------------------------------------------------------
def _default(resource: Resource, obj: Obj, live: Obj | None) -> None:
    """A few server-side defaults, so live objects differ from what was applied as real ones
    do (the runtime must compare hashes, not objects)."""
    if resource.kind == "Secret":  # no spec; type defaults to Opaque
        obj.setdefault("type", "Opaque")
        return
    if resource.kind in ("ConfigMap", "Event"):  # no spec
        return
    spec = obj.setdefault("spec", {})
    if resource.kind == "Deployment":
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("replicas", 1)
        pod = spec.get("template", {}).setdefault("spec", {})
        pod.setdefault("restartPolicy", "Always")
        pod.setdefault("dnsPolicy", "ClusterFirst")
        pod.setdefault("schedulerName", "default-scheduler")
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
    if resource.kind == "Service":
        ip = (live or {}).get("spec", {}).get(
            "clusterIP"
        ) or f"10.96.{len(obj['metadata']['name'])}.{int(time.monotonic_ns()) % 250 + 1}"
        spec.setdefault("clusterIP", ip)
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")


def _disruption_budget_problems(spec: Obj) -> list[str]:
    """policy/v1 validation of a budget: at most one of minAvailable / maxUnavailable, a
    known unhealthyPodEvictionPolicy, a valid selector (an empty one selects every pod of
    the namespace, as the real one)."""
    problems = _selector_problems(spec.get("selector") or {}, "spec.selector")
    if "minAvailable" in spec and "maxUnavailable" in spec:
        problems.append("spec: Invalid value: minAvailable and maxUnavailable cannot be both set")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy not in (None, "IfHealthyBudget", "AlwaysAllow"):
        problems.append(
            f"spec.unhealthyPodEvictionPolicy: Unsupported value: {policy!r}: supported "
            'values: "IfHealthyBudget", "AlwaysAllow"'
        )
    return problems


def _schema_problem(obj: Obj) -> str:
    body = {k: v for k, v in obj.items() if k != "status"}
    error = jsonschema.exceptions.best_match(
        _validator(obj["kind"], obj["apiVersion"]).iter_errors(body)
    )
    if error is None:
        return ""
    return f"{'.'.join(str(p) for p in error.path)}: {error.message}"


@functools.cache
def _validator(kind: str, api_version: str) -> Any:
    """kubernetes-validate's strict schema for a kind, loaded once (its ``validate`` reads
    the definitions file on every call: too slow for every write)."""
    folder = importlib.resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/v{SCHEMA_VERSION}.0-local-strict"
    )
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = json.loads(folder.joinpath(f"{kind.lower()}-{group}.json").read_text())
    definitions = json.loads(folder.joinpath("_definitions.json").read_text())
    registry: referencing.Registry[Any] = referencing.Resource.from_contents(definitions) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry()
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.match(name))


# -- label selectors -------------------------------------------------------------------------
def parse_selector(text: str) -> Callable[[Obj], bool]:
    """A matcher for a label selector string; ApiError 400 when it does not parse."""
    terms: list[Callable[[dict[str, str]], bool]] = []
    for raw in _split_terms(text):
        term = raw.strip()
        if not term:
            continue
        m = re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", term)
        if m:
            key, op = m.group(1), m.group(2)
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            if not values:
                raise ApiError(
                    400,
                    "BadRequest",
                    f"unable to parse requirement: {term!r}: for 'in', 'notin' operators, "
                    "values set can't be empty",
                )
            terms.append(_in(key, values) if op == "in" else _notin(key, values))
            continue
        m = re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)", term)
        if m:
            key, op, value = m.groups()
            terms.append(_equals(key, value) if op != "!=" else _not_equals(key, value))
            continue
        m = re.fullmatch(r"(!?)([\w./-]+)", term)
        if m:
            terms.append(_exists(m.group(2), not m.group(1)))
            continue
        raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")

    def match(obj: Obj) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(t(labels) for t in terms)

    return match


def _split_terms(text: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    yield text[start:]


def _in(key: str, values: set[str]) -> Callable[[dict[str, str]], bool]:
    return lambda labels: labels.get(key) in values


def _notin(key: str, values: set[str]) -> Callable[[dict[str, str]], bool]:
    return lambda labels: labels.get(key) not in values


def _equals(key: str, value: str) -> Callable[[dict[str, str]], bool]:
    return lambda labels: labels.get(key) == value


def _not_equals(key: str, value: str) -> Callable[[dict[str, str]], bool]:
    return lambda labels: labels.get(key) != value


def _exists(key: str, present: bool) -> Callable[[dict[str, str]], bool]:
    return lambda labels: (key in labels) == present


def _selects(selector: Obj, obj: Obj) -> bool:
    """A ``LabelSelector`` (matchLabels and matchExpressions, ANDed) against an object; an
    empty selector selects nothing here (a Deployment may not have one: see _validate)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    wanted = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not wanted and not expressions:
        return False
    return all(labels.get(k) == v for k, v in wanted.items()) and all(
        _expression(e)(labels) for e in expressions
    )


def _expression(e: Obj) -> Callable[[dict[str, str]], bool]:
    key, op, values = e.get("key", ""), e.get("operator"), set(e.get("values") or [])
    if op == "In":
        return _in(key, values)
    if op == "NotIn":
        return _notin(key, values)
    return _exists(key, op == "Exists")


def _selector_problems(selector: Obj, where: str) -> list[str]:
    """What the real validation says about a LabelSelector's expressions."""
    problems = []
    for i, e in enumerate(selector.get("matchExpressions") or []):
        at = f"{where}.matchExpressions[{i}]"
        op, values = e.get("operator"), e.get("values") or []
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            problems.append(f'{at}.operator: Invalid value: "{op}": not a valid selector operator')
        elif op in ("In", "NotIn") and not values:
            problems.append(
                f"{at}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
            )
        elif op in ("Exists", "DoesNotExist") and values:
            problems.append(
                f"{at}.values: Forbidden: may not be specified when `operator` is 'Exists' or "
                "'DoesNotExist'"
            )
    return problems


# -- merging --------------------------------------------------------------------------------
def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, on copies (stored objects are never shared)."""
    return copy.deepcopy(contract_merge_patch(target, patch))


def strategic_merge(target: Any, patch: Any, kind: str, key: str = "") -> Any:
    """Strategic merge patch for the lists this stand-in knows (others are replaced)."""
    if isinstance(patch, dict):
        if any(k.startswith("$") for k in patch):
            raise ApiError(
                400,
                "BadRequest",
                "strategic merge directives ($patch, ...) are not modeled by the stand-in",
            )
        result = copy.deepcopy(target) if isinstance(target, dict) else {}
        for k, v in patch.items():
            if v is None:
                result.pop(k, None)
            else:
                result[k] = strategic_merge(result.get(k), v, kind, k)
        return result
    merge_key = MERGE_KEYS.get(key) or (
        PORT_MERGE_KEYS.get(kind, PORT_MERGE_KEYS["default"]) if key == "ports" else None
    )
    if isinstance(patch, list) and merge_key and isinstance(target, list):
        result_list = copy.deepcopy(target)
        for item in patch:
            at = next(
                (
                    i
                    for i, old in enumerate(result_list)
                    if isinstance(item, dict) and old.get(merge_key) == item.get(merge_key)
                ),
                None,
            )
            if at is None:
                result_list.append(copy.deepcopy(item))
            else:
                result_list[at] = strategic_merge(result_list[at], item, kind)
        return result_list
    return copy.deepcopy(patch)


def _apply_merge(target: Any, applied: Any) -> Any:
    """The applied configuration over the live object: maps merged, anything else (lists
    included) replaced: ownership here is per leaf, lists counting as one leaf."""
    if isinstance(applied, dict) and isinstance(target, dict):
        result = copy.deepcopy(target)
        for k, v in applied.items():
            result[k] = _apply_merge(result.get(k), v)
        return result
    return copy.deepcopy(applied)


def _owned(obj: Obj) -> Obj:
    """The parts of an object a writer can own (not status, not server metadata)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k in ("labels", "annotations")}
    return {
        **{k: v for k, v in obj.items() if k not in ("status", "metadata", "apiVersion", "kind")},
        "metadata": meta,
    }


def _leaves(obj: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if isinstance(obj, dict) and obj:
        out: dict[tuple[str, ...], Any] = {}
        for k, v in obj.items():
            out.update(_leaves(v, (*prefix, k)))
        return out
    return {prefix: obj} if prefix else {}


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _remove_path(obj: Obj, path: tuple[str, ...]) -> None:
    parents = [obj]
    for part in path[:-1]:
        nxt = parents[-1].get(part)
        if not isinstance(nxt, dict):
            return
        parents.append(nxt)
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):  # prune maps the removal emptied
        if parents[depth] == {}:
            parents[depth - 1].pop(path[depth - 1], None)


# -- status builders (what the kubelet and scheduler would write) ------------------------------
def _pod_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _condition(kind: str, status: str, reason: str = "", message: str = "") -> Obj:
    c: Obj = {"type": kind, "status": status, "lastTransitionTime": _now()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def _container(
    name: str,
    state: Obj,
    *,
    ready: bool = False,
    restarts: int = 0,
    last: Obj | None = None,
    image: str = "openeas/processor-triton:0.1.0",
) -> Obj:
    return {
        "name": name,
        "state": state,
        "lastState": last or {},
        "ready": ready,
        "restartCount": restarts,
        "image": image,
        "imageID": "",
        "started": "running" in state,
    }


def _terminated(code: int, reason: str, message: str = "") -> Obj:
    t: Obj = {"exitCode": code, "reason": reason, "startedAt": _now(), "finishedAt": _now()}
    if message:
        t["message"] = message
    return t


def status_ready(init: str | None = "model-pull") -> Obj:
    inits = (
        [_container(init, {"terminated": _terminated(0, "Completed")}, ready=True)] if init else []
    )
    return {
        "phase": "Running",
        "conditions": [
            _condition("PodScheduled", "True"),
            _condition("Initialized", "True"),
            _condition("ContainersReady", "True"),
            _condition("Ready", "True"),
        ],
        "initContainerStatuses": inits,
        "containerStatuses": [
            _container("processor", {"running": {"startedAt": _now()}}, ready=True)
        ],
    }


def status_starting() -> Obj:
    """Scheduled, the model pulled, the server up but not ready yet (loading models)."""
    status = status_ready()
    status["conditions"] = [
        _condition("PodScheduled", "True"),
        _condition("Initialized", "True"),
        _condition("ContainersReady", "False"),
        _condition("Ready", "False", "ContainersNotReady"),
    ]
    status["containerStatuses"][0]["ready"] = False
    return status


def status_pulling(init: str = "model-pull") -> Obj:
    """Scheduled, the model pull (init container) running, the server not started yet."""
    return {
        "phase": "Pending",
        "conditions": [
            _condition("PodScheduled", "True"),
            _condition("Initialized", "False", "ContainersNotInitialized"),
            _condition("ContainersReady", "False", "ContainersNotReady"),
            _condition("Ready", "False", "ContainersNotReady"),
        ],
        "initContainerStatuses": [_container(init, {"running": {"startedAt": _now()}})],
        "containerStatuses": [_container("processor", {"waiting": {"reason": "PodInitializing"}})],
    }


def status_unschedulable(
    message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 "
    "nodes are available: 3 No preemption victims found for incoming pod.",
) -> Obj:
    return {
        "phase": "Pending",
        "conditions": [_condition("PodScheduled", "False", "Unschedulable", message)],
    }


def status_image_pull_backoff(image: str = "openeas/processor-triton:0.1.0") -> Obj:
    message = f'Back-off pulling image "{image}"'
    return {
        "phase": "Pending",
        "conditions": [
            _condition("PodScheduled", "True"),
            _condition("Initialized", "False", "ContainersNotInitialized"),
        ],
        "initContainerStatuses": [
            _container(
                "model-pull",
                {"waiting": {"reason": "ImagePullBackOff", "message": message}},
                image=image,
            )
        ],
        "containerStatuses": [
            _container("processor", {"waiting": {"reason": "PodInitializing"}}, image=image)
        ],
    }


def status_init_failed(
    exit_code: int = 3,
    message: str = "openeas: model pull failed: bucket 'triton-model-repo' does not exist",
    restarts: int = 2,
) -> Obj:
    last = {"terminated": _terminated(exit_code, "Error", message)}
    return {
        "phase": "Pending",
        "conditions": [
            _condition("PodScheduled", "True"),
            _condition("Initialized", "False", "ContainersNotInitialized"),
        ],
        "initContainerStatuses": [
            _container(
                "model-pull",
                {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": "back-off 40s restarting failed container=model-pull",
                    }
                },
                restarts=restarts,
                last=last,
            )
        ],
        "containerStatuses": [_container("processor", {"waiting": {"reason": "PodInitializing"}})],
    }


def status_crash_loop(
    exit_code: int = 1,
    reason: str = "Error",
    message: str = "openeas: tritonserver exited: error: creating server",
    restarts: int = 3,
) -> Obj:
    status = status_starting()
    status["containerStatuses"] = [
        _container(
            "processor",
            {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": "back-off 1m20s restarting failed container=processor",
                }
            },
            restarts=restarts,
            last={"terminated": _terminated(exit_code, reason, message)},
        )
    ]
    return status


def status_oom_killed(restarts: int = 1) -> Obj:
    return status_crash_loop(exit_code=137, reason="OOMKilled", message="", restarts=restarts)


def _rollout_bounds(spec: Obj, replicas: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) of a Deployment spec as pod counts, as the real
    controller resolves them (surge rounds up, unavailable down; never both zero)."""
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0, replicas
    rolling = strategy.get("rollingUpdate") or {}

    def resolve(value: int | str, round_up: bool) -> int:
        if isinstance(value, int):
            return value
        share = int(value.rstrip("%")) * replicas
        return -(-share // 100) if round_up else share // 100

    surge = resolve(rolling.get("maxSurge", "25%"), True)
    unavailable = resolve(rolling.get("maxUnavailable", "25%"), False)
    return (surge, 1) if surge == unavailable == 0 else (surge, unavailable)


def _short_hash(template: Obj) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
