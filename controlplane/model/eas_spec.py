"""The parts of today's EAS service JSON beyond the processor form: ``containers[]``,
``storage[]``, ``cloud``, ``labels``, rollout and shutdown fields, and the spellings EAS
writes the same fields in (``metadata.name``, dotted keys such as ``"rpc.keepalive"``, the
autoscaler's short ``strategies`` map).

:mod:`controlplane.model.spec` builds its models from these and calls :func:`normalise` on every
spec before validation (create, update and loading a row alike: it is idempotent), and
:func:`workload` to learn what a spec runs. A ``containers[]`` entry whose command runs
``tritonserver`` *is* a ``triton`` service: its flags go through the processor's allow-list
and ``--model-repository`` naming an OSS mount's ``mount_path`` becomes that mount's
``oss://`` path, so the model pull, readiness and metrics are the processor's own. Pure.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TRITON = "triton"
CONTAINER = "container"  # a containers[] entry that runs anything but tritonserver

PERCENT_OR_COUNT = re.compile(r"^(100|[1-9]?[0-9])%$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _one_of(model: BaseModel, names: tuple[str, ...], where: str) -> None:
    given = [n for n in names if getattr(model, n) is not None]
    if len(given) != 1:
        listed = ", ".join(names)
        raise ValueError(
            f"{where} takes exactly one of {listed}; given: {', '.join(given) or 'none'}"
        )


class HttpGet(_Strict):
    path: str = Field(default="/", max_length=1024)
    port: int = Field(ge=1, le=65535)


class TcpSocket(_Strict):
    port: int = Field(ge=1, le=65535)


class ExecCheck(_Strict):
    command: list[str] | str = Field(min_length=1)


class Check(_Strict):
    """EAS's ``startup_check`` / ``liveness_check`` / ``readiness_check`` (Kubernetes probes)."""

    http_get: HttpGet | None = None
    tcp_socket: TcpSocket | None = None
    exec: ExecCheck | None = None
    initial_delay_seconds: int | None = Field(default=None, ge=0, le=3600)
    period_seconds: int | None = Field(default=None, ge=1, le=3600)
    timeout_seconds: int | None = Field(default=None, ge=1, le=3600)
    failure_threshold: int | None = Field(default=None, ge=1, le=1000)
    success_threshold: int | None = Field(default=None, ge=1, le=1000)

    @model_validator(mode="after")
    def _kind(self) -> Check:
        _one_of(self, ("http_get", "tcp_socket", "exec"), "a check")
        return self


class EnvVar(_Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$", max_length=256)
    value: str = Field(max_length=32_768)


class Prepare(_Strict):
    pythonRequirements: list[str] | None = Field(default=None, max_length=256)
    pythonRequirementsPath: str | None = Field(default=None, max_length=2048)


class Container(_Strict):
    image: str = Field(min_length=1, max_length=1024)
    command: str | None = Field(default=None, min_length=1, max_length=16_384)
    script: str | None = Field(default=None, min_length=1, max_length=16_384)
    port: int | None = Field(default=None, ge=1, le=65535)
    env: list[EnvVar] | None = Field(default=None, max_length=256)
    prepare: Prepare | None = None
    startup_check: Check | None = None
    liveness_check: Check | None = None
    readiness_check: Check | None = None

    @model_validator(mode="after")
    def _run(self) -> Container:
        if self.command is not None and self.script is not None:
            raise ValueError("a container takes command or script, not both")
        if self.command is not None:
            try:
                shlex.split(self.command)
            except ValueError as e:  # an unclosed quote
                raise ValueError(
                    f"command {self.command[:60]!r} cannot be split into words ({e}); "
                    "close its quotes"
                ) from None
        return self

    @property
    def argv(self) -> list[str]:
        """The command as words (``script`` runs through a shell, as EAS runs it)."""
        if self.script is not None:
            return ["sh", "-c", self.script]
        return shlex.split(self.command) if self.command else []

    @property
    def runs_triton(self) -> bool:
        argv = self.argv
        return bool(argv) and posixpath.basename(argv[0]) == "tritonserver"


class OssMount(_Strict):
    path: str = Field(pattern=r"^oss://", max_length=2048)
    readOnly: bool = True
    endpoint: str | None = Field(default=None, max_length=256)


class NfsMount(_Strict):
    server: str = Field(min_length=1, max_length=256)
    path: str = Field(default="/", max_length=2048)
    readOnly: bool = False


class EmptyDir(_Strict):
    medium: Literal["memory", "Memory", ""] = ""
    size_limit: int | None = Field(default=None, ge=1, le=4096)  # GB, as EAS writes it


class Storage(_Strict):
    mount_path: str = Field(pattern=r"^/", max_length=1024)
    oss: OssMount | None = None
    nfs: NfsMount | None = None
    empty_dir: EmptyDir | None = None

    @model_validator(mode="after")
    def _kind(self) -> Storage:
        _one_of(self, ("oss", "nfs", "empty_dir"), "a storage entry")
        return self


class InstanceType(_Strict):
    type: str = Field(min_length=1, max_length=128)


class Computing(_Strict):
    instance_type: str | None = Field(default=None, min_length=1, max_length=128)
    instances: list[InstanceType] | None = Field(default=None, max_length=16)

    @property
    def types(self) -> list[str]:
        out = [self.instance_type] if self.instance_type else []
        return out + [i.type for i in self.instances or [] if i.type not in out]


class Cloud(_Strict):
    computing: Computing | None = None


class RollingStrategy(_Strict):
    """EAS's ``metadata.rolling_strategy``: whole replicas or a percentage of them."""

    max_surge: int | str | None = None
    max_unavailable: int | str | None = None

    @model_validator(mode="after")
    def _values(self) -> RollingStrategy:
        for name in ("max_surge", "max_unavailable"):
            value = getattr(self, name)
            if isinstance(value, int) and not 0 <= value <= 1000:
                raise ValueError(f"{name} is a count from 0 to 1000 or a percentage like '25%'")
            if isinstance(value, str) and not PERCENT_OR_COUNT.match(value):
                raise ValueError(
                    f"{name} {value!r}: write a count like 1 or a percentage like '25%'"
                )
        if self.max_surge in (0, "0%") and self.max_unavailable in (0, "0%", None):
            raise ValueError("max_surge and max_unavailable cannot both be 0: nothing could roll")
        return self

    def counts(self, replicas: int) -> tuple[int, int]:
        """(surge, unavailable) in replicas for a service of ``replicas``: a percentage
        rounds surge up and unavailable down, as Kubernetes does; unset surge is 1 and
        unset unavailable 0 (EAS's defaults for a small service)."""
        surge = _count(self.max_surge, replicas, up=True, default=1)
        unavailable = _count(self.max_unavailable, replicas, up=False, default=0)
        return surge, unavailable


def _count(value: int | str | None, replicas: int, *, up: bool, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, int):
        return value
    share = int(value[:-1]) * replicas
    return -(-share // 100) if up else share // 100


class EasOptions(_Strict):
    termination_grace_period: int | None = Field(default=None, ge=0, le=3600)  # seconds


@dataclass(frozen=True)
class Workload:
    """What a spec runs: a processor and its parameters, or a plain container."""

    processor: str
    params: list[str]
    container: Container | None = None


def workload(
    processor: str | None,
    params: list[str],
    containers: list[Container] | None,
    storage: list[Storage] | None,
) -> Workload:
    """The processor form as written, or the first container as a processor: triton for a
    ``tritonserver`` command (flags as ``processor_params``), else :data:`CONTAINER`."""
    if not containers:
        return Workload(processor or "", list(params))
    container = containers[0]
    if not container.runs_triton:
        return Workload(CONTAINER, [], container)
    return Workload(TRITON, triton_params(container.argv[1:], storage or []), container)


MODEL_REPOSITORY_FLAGS = ("--model-repository", "--model-store")


def triton_params(flags: list[str], storage: list[Storage]) -> list[str]:
    """tritonserver's flags with ``--model-repository=<mount_path>[/sub]`` naming an OSS
    mount rewritten to that mount's ``oss://`` path: the processor pulls it as it pulls
    any repository (CRC-checked, cached), into the folder that stands for the mount."""
    out: list[str] = []
    i = 0
    while i < len(flags):
        flag = flags[i]
        name, eq, value = flag.partition("=")
        if name in MODEL_REPOSITORY_FLAGS:
            if not eq and i + 1 < len(flags):
                i += 1
                value = flags[i]
            out.append(f"--model-repository={mounted(value, storage)}")
        else:
            out.append(flag)
        i += 1
    return out


def mounted(path: str, storage: list[Storage]) -> str:
    """``path`` as the OSS URI it holds when an OSS mount covers it, else unchanged."""
    for entry in storage:
        if entry.oss is None:
            continue
        mount = entry.mount_path.rstrip("/") or "/"
        if path == mount or path.startswith(mount + "/"):
            rest = path[len(mount) :].strip("/")
            base = entry.oss.path if entry.oss.path.endswith("/") else entry.oss.path + "/"
            return base + (rest + "/" if rest else "")
    return path


# -- spellings --------------------------------------------------------------------------------


def normalise(data: Any) -> Any:
    """EAS's other spellings of the same spec, as the nested form this model reads:
    ``metadata.name`` for ``name``, dotted keys inside ``metadata``, and the autoscaler's
    ``{"min", "max", "strategies": {"qps": 10}}``. Raises ValueError on a contradiction
    (the same field written twice with different values)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        metadata = undot(metadata, "metadata")
        out["metadata"] = metadata
        name = metadata.get("name")
        if name is not None:
            if "name" in out and out["name"] != name:
                raise ValueError(
                    f"name {out['name']!r} and metadata.name {name!r} differ; write one of them"
                )
            out["name"] = name
    auto = out.get("autoscaler")
    if isinstance(auto, dict) and "strategies" in auto:
        out["autoscaler"] = short_autoscaler(auto)
    return out


def undot(mapping: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"rpc.keepalive": 3000}`` as ``{"rpc": {"keepalive": 3000}}``, merged with what is
    written nested; the same leaf twice with different values is a contradiction."""
    out: dict[str, Any] = {k: v for k, v in mapping.items() if "." not in k}
    for key, value in mapping.items():
        if "." not in key:
            continue
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ValueError(f"{where}.{key}: {where}.{part} is not an object")
            else:
                child = node[part] = dict(child)
            node = child
        if leaf in node and node[leaf] != value:
            raise ValueError(
                f"{where}.{key} is {value!r} but {where}.{'.'.join(parents)} says "
                f"{leaf}: {node[leaf]!r}; write it once"
            )
        node[leaf] = value
    return out


def short_autoscaler(auto: dict[str, Any]) -> dict[str, Any]:
    """EAS's short form: ``strategies`` maps a metric to its threshold."""
    if "scaleStrategies" in auto:
        raise ValueError("autoscaler: write strategies or scaleStrategies, not both")
    strategies = auto["strategies"]
    if not isinstance(strategies, dict):
        raise ValueError('autoscaler.strategies is a map such as {"qps": 10, "cpu": 80}')
    out = {k: v for k, v in auto.items() if k != "strategies"}
    out["scaleStrategies"] = [{"metricName": k, "threshold": v} for k, v in strategies.items()]
    return out
