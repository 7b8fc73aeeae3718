"""The gateway's one typed settings object, read from ``OPENEAS_*`` environment variables.

``openeas gateway`` builds it from the environment and its flags; ``openeas up`` builds it
in-process and passes it to :func:`gateway.app.start_gateway`. Nothing below reads the
environment on its own.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


class GatewaySettings(BaseSettings):
    """Shared names (control-plane URL, admin token) use the platform's ``OPENEAS_`` names;
    the gateway's own knobs are ``OPENEAS_GATEWAY_*``."""

    model_config = SettingsConfigDict(
        env_prefix="OPENEAS_GATEWAY_", extra="ignore", populate_by_name=True
    )

    controlplane_url: str = Field(
        default="http://127.0.0.1:8081",
        validation_alias=AliasChoices("controlplane_url", "OPENEAS_CONTROLPLANE_URL"),
        description="Base URL of the control plane the route table is long-polled from.",
    )
    routes_token: SecretStr = Field(
        default=SecretStr(""),
        validation_alias=AliasChoices("routes_token", "OPENEAS_ROUTES_TOKEN"),
        description="The route-reader credential: opens the control plane's route table and "
        "nothing else (least privilege).",
    )
    admin_token: SecretStr = Field(
        default=SecretStr(""),
        validation_alias=AliasChoices("admin_token", "OPENEAS_ADMIN_TOKEN"),
        description="Used for the route table only when OPENEAS_ROUTES_TOKEN is unset "
        "(deprecated: the gateway then holds a credential that can change every service).",
    )

    def control_plane_credential(self) -> str:
        return (self.routes_token or self.admin_token).get_secret_value()

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    grpc_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port of the gRPC door (tritonclient.grpc with the service token; 0 picks "
        "a free one); unset: no gRPC. `openeas up` defaults it to 8001.",
    )
    http_yield_at: int = Field(
        default=2,
        ge=0,
        le=100_000,
        description="With this many HTTP calls in flight or more, the gateway gives up the CPU "
        "after each read from a replica (sched_yield): a replica sharing the core answers "
        "several calls before the next wake-up, which then carries them all (0: never).",
    )
    grpc_yield_at: int = Field(
        default=2,
        ge=0,
        le=100_000,
        description="With this many gRPC calls in flight or more, the door gives up the CPU "
        "after each read (sched_yield): a replica sharing the core answers several calls "
        "before the next read, which then carries them all (0: never).",
    )
    workers: int = Field(default=1, ge=1, le=256)
    domain: str = Field(
        default="",
        description="Per-service host names: a gRPC call whose :authority is "
        "`<service>.<domain>` is for that service (EAS's per-service domains); unset: calls "
        "name their service by their token alone.",
    )

    shutdown_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="On SIGTERM, requests in progress get this long to finish (keep the pod's "
        "terminationGracePeriodSeconds above it; the chart does).",
    )
    head_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A request head not complete within this many seconds is cut off "
        "(nginx's client_header_timeout).",
    )
    body_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A request body that sends nothing for this many seconds while the "
        "gateway reads it is cut off with 408 (nginx's client_body_timeout).",
    )
    max_body_bytes: int = Field(
        default=64 * MIB, ge=1, description="413 above this request body size."
    )
    signature_skew_s: float = Field(
        default=900.0,
        gt=0,
        description="A signed predict call (Authorization: EAS <signature>) is refused when "
        "its Date is further than this from the gateway's clock (EAS: 15 minutes).",
    )
    default_timeout_ms: int = Field(
        default=600_000,
        ge=1,
        description="Upstream timeout for a route that carries none (timeout_ms <= 0).",
    )
    connect_timeout_ms: int = Field(
        default=3_000, ge=1, description="TCP connect to a replica; past it, the next one."
    )

    @property
    def connect_timeout_s(self) -> float:
        return self.connect_timeout_ms / 1000.0

    buffer_body_bytes: int = Field(
        default=256 * 1024,
        ge=0,
        description="Request bodies up to this size are read whole before forwarding "
        "(one upstream write); larger ones are streamed.",
    )
    splice_min_bytes: int = Field(
        default=0,
        ge=0,
        description="The rest of a streamed request body of known length is moved from the "
        "client's socket to the replica's by the kernel (splice, Linux) once at least this "
        "many bytes are still to come (e.g. 65536); 0 (the default): never, such a body is "
        "relayed through one buffer of the gateway's instead (read, then written: no copy "
        "into Python's objects). Splicing takes the gateway's copies out but makes a replica "
        "on the same host read spliced pages, which cost it more than the gateway saves "
        "(docs/architecture.md).",
    )
    keepalive_s: float = Field(default=60.0, gt=0, description="Idle upstream keep-alive.")
    retry_after_s: int = Field(default=1, ge=0, description="Retry-After on 503.")
    replica_down_s: float = Field(
        default=1.0,
        ge=0,
        description="A replica that refused a connection is tried last for this long.",
    )

    route_snapshot: str = Field(
        default="",
        description="File the route table is saved to when the control plane stops answering "
        "and on shutdown; a gateway that starts while the control plane does not answer serves "
        "from it (empty: no snapshot).",
    )
    route_snapshot_shared: str = Field(
        default="",
        description="A snapshot only read, kept by the control plane (the chart mounts its "
        "ConfigMap here): a starting gateway that gets no table in time serves the newer of "
        "it and route_snapshot (empty: none).",
    )
    poll_wait_s: float = Field(
        default=25.0, gt=0, description="Long-poll hold asked of the control plane."
    )
    poll_backoff_max_s: float = Field(
        default=1.0, gt=0, description="Cap of the retry back-off while it is unreachable."
    )
    report_interval_s: float = Field(
        default=0.5,
        ge=0,
        le=60,
        description="How often each gateway process reports per-service load to the control "
        "plane's autoscaler, with the route-reader token (0: never).",
    )
    wake_queue: int = Field(
        default=128,
        ge=1,
        le=100_000,
        description="Requests held per service while it wakes from zero (or its "
        "metadata.rpc.max_queue_size, when lower); past it: 450, safe to retry.",
    )
    redis_url: str = Field(
        default="",
        validation_alias=AliasChoices("redis_url", "OPENEAS_REDIS_URL"),
        description="Redis holding async services' queues (redis://host:port/db); empty: "
        "async services answer 503 (`openeas up` starts an embedded Redis and sets it).",
    )
    queue_prefix: str = Field(
        default="openeas:",
        max_length=64,
        description="Prefix of every Redis key of the queues (several installations, or "
        "tests, may share one Redis).",
    )
    queue_claim_idle_s: float = Field(
        default=30.0,
        gt=0,
        le=86_400,
        description="A message held this long by a replica that is still routed is handed "
        "to another one (a replica that left the route table loses its messages at once).",
    )
    health_path: str = "/gateway/healthz"
    metrics_path: str = "/metrics"
