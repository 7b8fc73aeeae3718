"""The client-facing server's handler: each request to the predict proxy, the gateway's
health or metrics page, or (in ``openeas up``) the fallback proxy to the control plane.
Called once per request, so compiled with the proxy (``gateway/native.py``).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol
from urllib.parse import urlsplit

from gateway.http.derived import Derived
from gateway.http.problems import Problem, write_problem
from gateway.http.proxy import PredictProxy
from gateway.http.server import Request, RequestHandler
from gateway.routing.paths import BadTarget, Target, parse_target


class Pages(Protocol):
    """The gateway's own pages (:class:`gateway.app.Gateway`)."""

    def health_page(self, request: Request) -> None: ...

    def metrics_page(self, request: Request) -> Coroutine[Any, Any, None] | None: ...


class Fallback(Protocol):
    def handle(self, request: Request) -> Coroutine[Any, Any, None]: ...


class Queues(Protocol):
    """Async services' queue protocol (:class:`gateway.queue.door.QueueDoor`)."""

    def serves(self, target: Target) -> bool: ...

    def handle(self, request: Request, target: Target) -> Coroutine[Any, Any, None]: ...


class Router(RequestHandler):
    def __init__(
        self,
        predict: PredictProxy,
        pages: Pages,
        fallback: Fallback | None,
        *,
        health_path: str,
        metrics_path: str,
        queues: Queues | None = None,
    ) -> None:
        self.queues = queues  # None: no Redis configured (async services answer 503)
        self.predict = predict
        self.pages = pages
        self.fallback = fallback
        self.health_path = health_path
        self.metrics_path = metrics_path

    def handle(self, request: Request) -> Coroutine[Any, Any, None] | None:
        """Answer now (and finish), or return the coroutine that will (see
        :mod:`gateway.http.server`)."""
        raw = request.target
        if raw[:1] != "/":
            if raw.startswith(("http://", "https://")):  # absolute-form (RFC 9112 §3.2.2)
                parts = urlsplit(raw)
                raw = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                request.target = raw
            else:
                _answer(request, Problem(400, "request-target must be a path"))
                return None
        if request.upgrade and not self._queue_target(raw):
            problem = Problem(501, "protocol upgrades are not supported")
            request.keep_alive = False
            _answer(request, problem)
            return None
        head = request.head
        own = raw is head.target  # (not rewritten above): what is read is kept with the head
        derived = head.derived
        if own and derived is not None:
            target = derived.target  # a repeated head, read before
        else:
            try:
                target = parse_target(raw)
            except BadTarget as e:
                _answer(request, Problem(400, str(e)))
                return None
            if own:
                head.derived = Derived(target)
        if target is not None:
            queues = self.queues
            if queues is not None and queues.serves(target):
                return queues.handle(request, target)
            return self.predict.dispatch(request, target)
        path = request.path
        if path == self.health_path:
            self.pages.health_page(request)
            return None
        if path == self.metrics_path:
            if request.method not in ("GET", "HEAD"):
                problem = Problem(405, "metrics are read with GET", headers={"Allow": "GET"})
                _answer(request, problem)
                return None
            return self.pages.metrics_page(request)
        if self.fallback is not None:
            return self.fallback.handle(request)
        problem = Problem(404, "not found: predict calls go to /api/predict/<service>/<path>")
        _answer(request, problem)
        return None

    def _queue_target(self, raw: str) -> bool:
        """Whether an upgrade goes to an async service's queue (a watch: WebSocket)."""
        if self.queues is None:
            return False
        try:
            target = parse_target(raw)
        except BadTarget:
            return False
        return target is not None and self.queues.serves(target)


def _answer(request: Request, problem: Problem) -> None:
    write_problem(request, problem)
    request.finish()
