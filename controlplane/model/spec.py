"""The EAS service spec: what users write in ``triton.config`` and POST to the API.

:class:`ServiceSpec` is the input (pydantic, unknown fields rejected); :class:`StoredSpec`, the
same without the token, is what a service row holds, validated once when the row is loaded,
so every reader gets typed fields and the defaults stated here, once. The API validates every
create and update through :func:`validate_spec`, which adds the processor's own checks, so a
bad spec never reaches the database.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from controlplane.model import eas_spec
from controlplane.model.eas_spec import (
    Cloud,
    Container,
    EasOptions,
    RollingStrategy,
    Storage,
    Workload,
)
from controlplane.model.errors import FieldProblem, InvalidSpec
from processors import registry
from processors.base import ProcessorError
from processors.storage import OssLocation, StorageError, parse_uri

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,61}[a-z0-9]$|^[a-z]$")
TOKEN_RE = re.compile(r"^[A-Za-z0-9_\-+/=.]{16,128}$")


# Metadata fields that only steer traffic (see StoredSpec.deployment).
ROUTING_ONLY = ("group", "weight", "traffic_state", "mirror")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Rpc(_Strict):
    keepalive: int | None = Field(default=None, ge=1, le=3_600_000)  # ms per request
    max_queue_size: int | None = Field(default=None, ge=1, le=100_000)
    rate_limit: int | None = Field(default=None, ge=1, le=1_000_000)  # per second, per instance
    enable_sigterm: bool | None = None
    # EAS's per-replica concurrency; for an async service, each replica's window on its
    # input queue (how many messages it is handed at once).
    worker_threads: int | None = Field(default=None, ge=1, le=1024)


class Mirror(_Strict):
    """A copy of ``ratio`` % of the service's requests goes to each target service after the
    primary answered; the answers are compared (byte-equal, or with ``tolerance`` output
    tensors within that absolute difference). The caller only ever sees the primary."""

    ratio: int = Field(ge=0, le=100)  # 0: configured but idle
    targets: list[str] = Field(min_length=1, max_length=8)
    tolerance: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @field_validator("targets")
    @classmethod
    def _targets(cls, v: list[str]) -> list[str]:
        for target in v:
            if not NAME_RE.match(target):
                raise ValueError(f"{target!r} is not a service name")
        if len(set(v)) != len(v):
            raise ValueError("a target is listed twice: list each service once")
        return v


TrafficState = Literal["grouping", "standalone"]
ServiceType = Literal["Async"]
DEFAULT_WEIGHT = 100


class Metadata(_Strict):
    instance: int = Field(default=1, ge=0, le=100)
    cpu: int = Field(default=1, ge=1, le=512)
    gpu: int = Field(default=0, ge=0, le=16)
    memory: int = Field(default=2000, ge=64, le=4_194_304)  # MB
    resource: str | None = Field(default=None, min_length=1, max_length=128)
    rpc: Rpc = Field(default_factory=Rpc)
    # Service groups (routing only: changing these rolls no replica). A member gets group
    # traffic only when "grouping"; new members start standalone unless the spec says so.
    group: str | None = Field(default=None, json_schema_extra={"pattern": NAME_RE.pattern})
    weight: int | None = Field(default=None, ge=0, le=1000)  # None: DEFAULT_WEIGHT
    traffic_state: TrafficState | None = None  # None: "standalone"
    mirror: Mirror | None = None  # shadows of its traffic (routing only, as the above)
    # EAS's own place for the service name (the same as top-level ``name``).
    name: str | None = Field(default=None, max_length=63)
    workspace_id: str | None = Field(default=None, max_length=128)  # stored, not used
    rolling_strategy: RollingStrategy | None = None
    eas: EasOptions | None = None
    # "Async": requests go through an input queue and answers to a sink (the ``queue``
    # section); None: a synchronous service.
    type: ServiceType | None = None

    @field_validator("group")
    @classmethod
    def _group(cls, v: str | None) -> str | None:
        if v is not None and not NAME_RE.match(v):
            raise ValueError(
                "group names are 1-63 lowercase letters, digits and '_', starting with a letter "
                "and not ending with '_' (as service names)"
            )
        return v

    @property
    def grouping(self) -> bool:
        return self.group is not None and self.traffic_state == "grouping"

    @property
    def group_weight(self) -> int:
        return DEFAULT_WEIGHT if self.weight is None else self.weight


# queue[backlog]: EAS's name for an async service's input messages not yet answered.
BACKLOG = "queue[backlog]"
MetricName = Literal["qps", "concurrency", "cpu", "queue_time_ms", "queue[backlog]"]
METRIC_NAMES: tuple[str, ...] = get_args(MetricName)


class ScaleStrategy(_Strict):
    """Keep ``metricName`` per replica near ``threshold``: qps (requests/s) and concurrency
    (in-flight requests) as the gateway counts them, cpu (%) from the runtime, queue_time_ms
    from Triton's own metrics, queue[backlog] (an async service's messages not yet answered)
    from its input queue."""

    metricName: MetricName
    threshold: float = Field(gt=0, le=1_000_000)


class ScaleRule(_Strict):
    stabilizationWindowSeconds: int = Field(ge=0, le=3600)


class OnZero(_Strict):
    """EAS's ``behavior.onZero`` (with ``min: 0``): after ``scaleDownGracePeriodSeconds``
    without a request the service goes to zero replicas; a request wakes it with
    ``scaleUpActivationReplicas``."""

    scaleDownGracePeriodSeconds: int = Field(default=600, ge=0, le=86_400)
    scaleUpActivationReplicas: int = Field(default=1, ge=1, le=100)


class Behavior(_Strict):
    scaleUp: ScaleRule = Field(default_factory=lambda: ScaleRule(stabilizationWindowSeconds=0))
    scaleDown: ScaleRule = Field(default_factory=lambda: ScaleRule(stabilizationWindowSeconds=300))
    onZero: OnZero | None = None  # None: EAS's defaults, when min is 0


class Autoscaler(_Strict):
    """EAS's ``autoscaler`` key: while set, it owns ``metadata.instance``. With ``min: 0``
    the service scales to zero when idle and a request wakes it (``behavior.onZero``)."""

    min: int = Field(ge=0, le=100)
    max: int = Field(ge=1, le=100)
    scaleStrategies: list[ScaleStrategy] = Field(min_length=1, max_length=len(METRIC_NAMES))
    behavior: Behavior = Field(default_factory=Behavior)

    @field_validator("max")
    @classmethod
    def _max(cls, v: int, info: ValidationInfo) -> int:
        low = info.data.get("min")
        if low is not None and v < low:
            raise ValueError(f"max ({v}) is below min ({low}); make max at least {low}")
        return v

    @field_validator("scaleStrategies")
    @classmethod
    def _distinct(cls, v: list[ScaleStrategy]) -> list[ScaleStrategy]:
        names = [s.metricName for s in v]
        if len(set(names)) != len(names):
            raise ValueError("each metricName may appear once; merge the repeated strategies")
        return v

    def clamp(self, instances: int) -> int:
        return max(self.min, min(self.max, instances))

    @property
    def on_zero(self) -> OnZero:
        return self.behavior.onZero or OnZero()

    @property
    def to_zero(self) -> bool:
        """Scales to zero when idle, and is woken by a request."""
        return self.min == 0


DEFAULT_QUEUE_LENGTH = 10_000
DEFAULT_PAYLOAD_KB = 8192
DEFAULT_MAX_DELIVERY = 5
DEFAULT_WINDOW = 5  # EAS's default worker_threads


class QueueSide(_Strict):
    """One of an async service's two queues, under EAS's queue sub-service names
    (``queue.source.*`` for the input queue, ``queue.sink.*`` for the results)."""

    max_length: int = Field(default=DEFAULT_QUEUE_LENGTH, ge=1, le=10_000_000)  # entries
    max_payload_size_kb: int = Field(default=DEFAULT_PAYLOAD_KB, ge=1, le=1_048_576)
    # When full: evict the oldest entry for the new one (True) or refuse the put (429).
    auto_evict: bool = False

    @property
    def max_payload_bytes(self) -> int:
        return self.max_payload_size_kb * 1024


class Queue(_Strict):
    """EAS's ``queue`` section of an async service (``metadata.type: "Async"``).

    ``cpu``, ``memory``, ``min_replica`` and ``resource`` size EAS's queue sub-service;
    here the queue is a pair of Redis Streams served by the gateway, so they are accepted
    and have nothing to size. ``default_path`` is OpenEAS's own: where a put to the bare
    ``/api/predict/<svc>`` is delivered on the replica (a put to
    ``/api/predict/<svc>/<path>`` goes to ``/<path>``)."""

    source: QueueSide = Field(default_factory=QueueSide)
    sink: QueueSide = Field(default_factory=QueueSide)
    # Deliveries of one message (a replica died or timed out holding it) before it goes
    # to the dead-letter stream instead.
    max_delivery: int = Field(default=DEFAULT_MAX_DELIVERY, ge=1, le=1000)
    default_path: str = Field(default="/", max_length=1024, pattern=r"^/[^?#\s]*$")
    cpu: int | None = Field(default=None, ge=1, le=512)
    memory: int | None = Field(default=None, ge=64, le=4_194_304)
    min_replica: int | None = Field(default=None, ge=0, le=100)
    resource: str | None = Field(default=None, min_length=1, max_length=128)


class StoredSpec(_Strict):
    """The EAS JSON as a service row keeps it: everything but the token (its own column)."""

    # The patterns and choices checked by the validators below, stated in the OpenAPI
    # document too, so schema-driven clients and fuzzers make valid requests.
    name: str = Field(json_schema_extra={"pattern": NAME_RE.pattern})
    # Required unless ``containers`` says what runs (see :func:`eas_spec.workload`).
    processor: str | None = Field(
        default=None, json_schema_extra={"enum": list[JsonValue](registry.names())}
    )
    processor_params: list[str] = Field(default_factory=list, max_length=64)
    model_path: str | None = Field(default=None, max_length=2048)
    oss_endpoint: str | None = Field(default=None, max_length=256)
    # EAS's key: request files replayed to each new replica before it is ready (docs/spec.md).
    warm_up_data_path: str | None = Field(default=None, max_length=2048)
    metadata: Metadata = Field(default_factory=Metadata)
    autoscaler: Autoscaler | None = None
    labels: dict[str, str] | None = None
    queue: Queue | None = None  # an async service's queues (metadata.type "Async")
    # The first container serves; the others run beside it (sidecars, Kubernetes only).
    containers: list[Container] | None = Field(default=None, min_length=1, max_length=8)
    storage: list[Storage] | None = Field(default=None, max_length=16)
    cloud: Cloud | None = None

    @model_validator(mode="before")
    @classmethod
    def _spellings(cls, data: Any) -> Any:
        return eas_spec.normalise(data)

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for key, value in (v or {}).items():
            if not 1 <= len(key) <= 128 or len(value) > 256:
                raise ValueError(
                    f"label {key[:40]!r}: keys are 1-128 characters and values at most 256"
                )
        if v is not None and len(v) > 64:
            raise ValueError("at most 64 labels")
        return v

    @property
    def workload(self) -> Workload:
        """What its replicas run: the processor form, or its container as one."""
        return eas_spec.workload(
            self.processor, self.processor_params, self.containers, self.storage
        )

    @property
    def is_async(self) -> bool:
        return self.metadata.type == "Async"

    @property
    def window(self) -> int:
        """How many of its input messages each replica of an async service holds at once."""
        return self.metadata.rpc.worker_threads or DEFAULT_WINDOW

    def public(self) -> dict[str, Any]:
        """As describe shows it and as a merge patch applies to (JSON, no nulls)."""
        return self.model_dump(mode="json", exclude_none=True)

    @property
    def to_zero(self) -> bool:
        """Its autoscaler takes it to zero when idle; a request wakes it."""
        return self.autoscaler is not None and self.autoscaler.to_zero

    def deployment(self) -> StoredSpec:
        """The spec without its routing-only fields: when only those change, the service
        keeps its generation and replicas (a release moves traffic, not pods)."""
        routing = {f: None for f in ROUTING_ONLY}
        return self.model_copy(update={"metadata": self.metadata.model_copy(update=routing)})

    def mirror_problems(self) -> list[FieldProblem]:
        """What the stored data cannot say is wrong with the mirror: the service itself as a
        target (the existence of the others is the store's to check)."""
        mirror = self.metadata.mirror
        if mirror is None or self.name not in mirror.targets:
            return []
        i = mirror.targets.index(self.name)
        return [
            FieldProblem(
                f"metadata.mirror.targets[{i}]",
                "a service cannot mirror to itself",
                "name another service (e.g. the new version to compare with)",
            )
        ]


class ServiceSpec(StoredSpec):
    """The EAS JSON. ``token`` is taken out before storing (see :func:`split_token`)."""

    token: str | None = Field(default=None, json_schema_extra={"pattern": TOKEN_RE.pattern})

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if NAME_RE.match(v):
            return v
        hint = re.sub(r"[^a-z0-9_]", "_", v.lower()).strip("_") or "my_service"
        if not hint[0].isalpha():
            hint = "svc_" + hint
        raise ValueError(
            "service names are 1-63 lowercase letters, digits and '_', starting with a "
            f"letter and not ending with '_'; for example {hint[:63]!r}"
        )

    @field_validator("token")
    @classmethod
    def _token(cls, v: str | None) -> str | None:
        if v is not None and not TOKEN_RE.match(v):
            raise ValueError(
                "a custom token is 16-128 characters of letters, digits and -_+/=.; "
                "or leave it out and one is generated"
            )
        return v


def k8s_name(name: str) -> str:
    """Kubernetes object name of a service. EAS names allow '_' but no '-', so replacing one
    by the other is deterministic and cannot make two services collide."""
    return name.replace("_", "-")


Check = Callable[["ServiceSpec"], list[FieldProblem]]


def validate_spec(data: Any, checks: Sequence[Check] = ()) -> ServiceSpec:
    """Parse and check a spec (schema, processor flags, then the deployment's own
    ``checks``, e.g. known resource groups); InvalidSpec lists every problem with its path."""
    try:
        spec = ServiceSpec.model_validate(data)
    except ValidationError as e:
        problems = [_problem(err) for err in e.errors()]
        if isinstance(data, dict) and "processor" not in data and "containers" not in data:
            problems += [NOTHING_TO_RUN]  # reported with the others, not after their fix
        raise InvalidSpec(problems) from e
    form = _form_problems(spec)
    if form:
        raise InvalidSpec(form)
    work = spec.workload
    params: list[str] = []
    if work.processor != eas_spec.CONTAINER:
        try:
            params = registry.get(work.processor).validate(work.params)
        except ProcessorError as e:
            field = e.field if work.container is None else "containers[0].command"
            raise InvalidSpec([FieldProblem(field, str(e), e.fix)]) from e
    problems = [p for check in checks for p in check(spec)] + _metrics_off(spec, params)
    problems += _warm_up_problems(spec.warm_up_data_path)
    problems += _on_zero_problems(spec)
    problems += _queue_problems(spec)
    if problems:
        raise InvalidSpec(problems)
    if work.container is not None:
        return _as_group(spec)  # the container as written; its flags are read again from it
    return _as_group(spec.model_copy(update={"processor_params": params}))


def _queue_problems(spec: ServiceSpec) -> list[FieldProblem]:
    """A ``queue`` section, and scaling on its backlog, belong to an async service."""
    auto = spec.autoscaler
    if auto is not None and not spec.is_async:
        for i, strategy in enumerate(auto.scaleStrategies):
            if strategy.metricName == BACKLOG:
                return [
                    FieldProblem(
                        f"autoscaler.scaleStrategies[{i}].metricName",
                        "queue[backlog] is an async service's input queue, and metadata.type "
                        'is not "Async"',
                        'add "type": "Async" to metadata, or scale on qps or concurrency',
                    )
                ]
    if spec.queue is not None and not spec.is_async:
        return [
            FieldProblem(
                "queue",
                "a queue section configures an asynchronous service, and metadata.type is "
                'not "Async"',
                'add "type": "Async" to metadata, or remove the queue section',
            )
        ]
    return []


def _as_group(spec: ServiceSpec) -> ServiceSpec:
    """An async service is also a group of its own name taking its traffic, as in EAS
    (unless its spec names another group); its queue section gets its defaults written."""
    if not spec.is_async:
        return spec
    update: dict[str, Any] = {"queue": spec.queue or Queue()}
    meta = spec.metadata
    if meta.group is None:
        grouped = {"group": spec.name, "traffic_state": meta.traffic_state or "grouping"}
        update["metadata"] = meta.model_copy(update=grouped)
    return spec.model_copy(update=update)


def _form_problems(spec: ServiceSpec) -> list[FieldProblem]:
    """A spec says what runs once: ``processor`` or ``containers``."""
    if spec.containers and (spec.processor is not None or spec.processor_params):
        return [
            FieldProblem(
                "processor",
                "processor and containers both say what runs",
                "keep containers (a tritonserver command is a triton service) or keep "
                "processor and processor_params",
            )
        ]
    if not spec.containers and spec.processor is None:
        return [NOTHING_TO_RUN]
    return []


NOTHING_TO_RUN = FieldProblem(
    "processor",
    "nothing to run",
    'add "processor": "triton" with processor_params, or containers '
    '[{"image": ..., "command": "tritonserver --model-repository=/models"}]',
)


def _metrics_off(spec: ServiceSpec, params: list[str]) -> list[FieldProblem]:
    """queue_time_ms is read from Triton's metrics port: refuse it when the flags turn it off."""
    auto = spec.autoscaler
    if auto is None or "--allow-metrics=false" not in params:
        return []
    for i, strategy in enumerate(auto.scaleStrategies):
        if strategy.metricName == "queue_time_ms":
            return [
                FieldProblem(
                    f"autoscaler.scaleStrategies[{i}].metricName",
                    "queue_time_ms is read from Triton's metrics, which --allow-metrics=false "
                    "turns off",
                    "remove --allow-metrics=false, or scale on qps or concurrency",
                )
            ]
    return []


def _warm_up_problems(path: str | None) -> list[FieldProblem]:
    """warm_up_data_path names request files the way --model-repository names models."""
    if path is None:
        return []
    fix = (
        "use oss://<bucket>/<prefix> (a folder of request files), an absolute path "
        "or file:///abs/path to a file or folder of <model>/<n>.json or .bin files"
    )
    try:
        location = parse_uri(path)
    except StorageError as e:
        return [
            FieldProblem("warm_up_data_path", f"{path!r} is not a path or oss:// URI ({e})", fix)
        ]
    if isinstance(location, OssLocation) and location.prefix.endswith((".json/", ".bin/")):
        return [
            FieldProblem(
                "warm_up_data_path",
                f"{path!r} names one file, but an oss:// warm_up_data_path names a folder",
                "give the folder holding it, e.g. oss://<bucket>/warm-up",
            )
        ]
    return []


def _on_zero_problems(spec: ServiceSpec) -> list[FieldProblem]:
    """``behavior.onZero`` only means something with min 0, and wakes within max."""
    auto = spec.autoscaler
    if auto is None or auto.behavior.onZero is None:
        return []
    path = "autoscaler.behavior.onZero"
    if auto.min > 0:
        return [
            FieldProblem(
                path,
                f"onZero applies only to a service that scales to zero, and min is {auto.min}",
                "set min to 0 (eascmd autoscale <name> --min 0 ...), or remove onZero",
            )
        ]
    activation = auto.behavior.onZero.scaleUpActivationReplicas
    if activation > auto.max:
        return [
            FieldProblem(
                f"{path}.scaleUpActivationReplicas",
                f"{activation} replicas on wake-up is above max ({auto.max})",
                f"make it at most {auto.max}, or raise max",
            )
        ]
    return []


def split_token(spec: ServiceSpec) -> tuple[StoredSpec, str | None]:
    """The spec as stored (no token: it lives in its own column) and the custom token."""
    return StoredSpec.model_validate(spec.model_dump(exclude={"token"})), spec.token


_FIXES = {
    "int_type": "use a whole number without quotes, e.g. 1",
    "string_type": 'use a string in double quotes, e.g. "value"',
    "list_type": 'use a list, e.g. ["--model-repository=oss://bucket/models"]',
    "missing": "add this field",
    "model_type": "use an object { ... }",
    "dict_type": "use an object { ... }",
    "literal_error": "use one of the values listed",
    "float_type": "use a number, e.g. 100",
}


def _problem(err: Any) -> FieldProblem:
    loc = _path(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        known = list(_model_at(err["loc"][:-1]).model_fields)
        near = difflib.get_close_matches(str(err["loc"][-1]), known, n=1, cutoff=0.6)
        allowed = ", ".join(known)
        hint = f"did you mean {near[0]!r}? " if near else ""
        return FieldProblem(loc, "unknown field", f"{hint}remove it; allowed here: {allowed}")
    message = str(err["msg"]).removeprefix("Value error, ")
    fix = _FIXES.get(kind, "")
    if kind.startswith(("greater_than", "less_than")) or kind.endswith("length"):
        fix = "change the value to fit that limit"
    return FieldProblem(loc, message, fix)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel]:
    """The model class at ``loc`` in a spec, through optional fields and list items."""
    model: type[BaseModel] = ServiceSpec
    for part in loc:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[str(part)].annotation
        candidates = [annotation, *get_args(annotation)]
        for arg in candidates + [a for c in candidates for a in get_args(c)]:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                model = arg
                break
    return model


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"
