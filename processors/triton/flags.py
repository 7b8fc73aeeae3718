"""Validation and normalisation of a service's ``processor_params`` for the ``triton`` processor.

The control plane calls :func:`validate` (through the processor registry) when a spec is
created or updated, and ``openeas processor run triton`` calls :func:`parse` again inside the
replica before launching ``tritonserver``. Pure: no I/O, no environment.

Tenants choose tritonserver flags from an allow-list; ports, addresses, plugin directories,
restricted-API overrides and anything naming a file outside the model repository are the
platform's. Value checks follow Triton's own parser (``command_line_parser.cc``): booleans take
a value (``--strict-readiness`` alone is a Triton usage error) spelled true/false/on/off/1/0 in
any case; they are normalised to ``true``/``false`` and every flag to ``--flag=value``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from processors.base import ProcessorError
from processors.storage.errors import PermanentStorageError
from processors.storage.uri import parse_uri

MODEL_REPOSITORY = "model-repository"

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

# Characters a blog or word processor puts where the user meant "--".
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
_DASH_NAMES = {"\u2013": "an en dash (–)", "\u2014": "an em dash (—)"}
_QUOTES = "\"'\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u00ab\u00bb"

_BLANKS = " \t" + _QUOTES  # what a pasted value should not be wrapped in

Normaliser = Callable[[str], str]


class _Invalid(ValueError):
    """A value checker's complaint with its own fix (plain ValueError: the flag's hint)."""

    def __init__(self, reason: str, *, fix: str) -> None:
        super().__init__(reason)
        self.fix = fix


@dataclass(frozen=True)
class FlagSpec:
    """How one allowed flag's value is checked; ``hint`` is what to type when it is wrong."""

    normalise: Normaliser | None  # None: a switch that takes no value
    hint: str
    repeatable: bool = False


# Value checkers: each returns the canonical spelling or raises ValueError(reason).


def _boolean(value: str) -> str:
    lowered = value.lower()
    if lowered in ("true", "on", "1"):
        return "true"
    if lowered in ("false", "off", "0"):
        return "false"
    raise ValueError("expects true or false")


def _integer(minimum: int = 0, maximum: int = _INT32_MAX) -> Normaliser:
    def check(value: str) -> str:
        if not re.fullmatch(r"[+-]?\d+", value):
            raise ValueError("expects a whole number")
        number = int(value)
        if not minimum <= number <= maximum:
            raise ValueError(f"expects a number from {minimum} to {maximum}")
        return str(number)

    return check


def _number(*, positive: bool = False) -> Normaliser:
    def check(value: str) -> str:
        if not re.fullmatch(r"\d+(\.\d*)?|\.\d+", value):
            raise ValueError("expects a non-negative number")
        if positive and float(value) == 0:
            raise ValueError("expects a number above 0")
        return value

    return check


def _choice(*options: str) -> Normaliser:
    by_lower = {option.lower(): option for option in options}

    def check(value: str) -> str:
        try:
            return by_lower[value.lower()]
        except KeyError:
            raise ValueError(f"expects one of {', '.join(options)}") from None

    return check


def _matching(pattern: str, what: str) -> Normaliser:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if "/" in value or "\\" in value:
            raise ValueError("must not name a file path: only the model repository is yours")
        if not compiled.fullmatch(value):
            raise ValueError(f"expects {what}")
        return value

    return check


def _backend_config(value: str) -> str:
    checked = _matching(
        r"(?:[A-Za-z0-9_-]+,)?[A-Za-z0-9_.-]+=[^\s,]*",
        "<backend>,<setting>=<value> or <setting>=<value>",
    )(value)
    setting = checked.split(",", 1)[-1].split("=", 1)[0]
    if setting in _PLATFORM_BACKEND_SETTINGS:
        raise _Invalid(
            f"setting {setting!r} is the platform's (it isolates replicas)",
            fix="remove this --backend-config",
        )
    return checked


# Python-backend settings that would let one replica reach another's shared memory.
SHM_PREFIX_SETTING = "shm-region-prefix-name"  # set on every start: run.shm_prefix
_PLATFORM_BACKEND_SETTINGS = frozenset({SHM_PREFIX_SETTING})


def _repository(uri: str) -> str:
    """``oss://bucket[/prefix]`` (bucket root allowed), ``file:///abs`` or ``/abs``: the
    storage layer's own parser decides, so what is accepted here is what a replica can pull."""
    try:
        parse_uri(uri)
    except PermanentStorageError as e:
        raise _Invalid(str(e), fix="") from None  # its message already says what to type
    return uri


_BOOL = FlagSpec(_boolean, "true")
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"


def _int_flag(minimum: int = 0, maximum: int = _INT32_MAX) -> FlagSpec:
    return FlagSpec(_integer(minimum, maximum), "<integer>")


ALLOWED: dict[str, FlagSpec] = {
    MODEL_REPOSITORY: FlagSpec(_repository, "oss://<bucket>/<prefix>"),
    # logging
    "log-verbose": _int_flag(),
    "log-info": _BOOL,
    "log-warning": _BOOL,
    "log-error": _BOOL,
    "log-format": FlagSpec(_choice("default", "ISO8601"), "default"),
    # server and model repository behaviour
    "exit-on-error": _BOOL,
    "exit-timeout-secs": _int_flag(),
    "strict-model-config": _BOOL,
    "strict-readiness": _BOOL,
    "disable-auto-complete-config": FlagSpec(None, ""),
    "model-control-mode": FlagSpec(_choice("none", "poll", "explicit"), "none"),
    "load-model": FlagSpec(
        _matching(rf"{_NAME}|\*", "a model name or *"), "<model name>", repeatable=True
    ),
    "repository-poll-secs": _int_flag(minimum=1),
    "model-config-name": FlagSpec(_matching(_NAME, "a config name such as h100"), "<name>"),
    "model-load-thread-count": _int_flag(minimum=1),
    "model-load-retry-count": _int_flag(),
    "model-namespacing": _BOOL,
    # endpoints (the platform owns their ports and addresses)
    "allow-http": _BOOL,
    "allow-grpc": _BOOL,
    "allow-metrics": _BOOL,
    "allow-gpu-metrics": _BOOL,
    "allow-cpu-metrics": _BOOL,
    "metrics-interval-ms": FlagSpec(_number(positive=True), "<milliseconds>"),
    "metrics-config": FlagSpec(
        _matching(r"[a-z_]+=[A-Za-z0-9_.,:]*", "<setting>=<value>"),
        "<setting>=<value>",
        repeatable=True,
    ),
    "http-thread-count": _int_flag(minimum=1),
    "grpc-infer-allocation-pool-size": _int_flag(),
    "grpc-infer-response-compression-level": FlagSpec(
        _choice("none", "low", "medium", "high"), "none"
    ),
    "grpc-keepalive-time": _int_flag(),
    "grpc-keepalive-timeout": _int_flag(),
    "grpc-keepalive-permit-without-calls": _BOOL,
    "grpc-http2-max-pings-without-data": _int_flag(),
    "grpc-http2-min-recv-ping-interval-without-data": _int_flag(),
    "grpc-http2-max-ping-strikes": _int_flag(),
    # backends, scheduling and caching
    "backend-config": FlagSpec(_backend_config, "<backend>,<setting>=<value>", repeatable=True),
    "rate-limit": FlagSpec(_choice("execution_count", "off"), "off"),
    "rate-limit-resource": FlagSpec(
        _matching(r"[A-Za-z0-9_]+:\d+(?::\d+)?", "<resource>:<count>[:<device>]"),
        "<resource>:<count>",
        repeatable=True,
    ),
    "cache-config": FlagSpec(
        _matching(r"local,size=\d+", "local,size=<bytes> (only the local cache is offered)"),
        "local,size=<bytes>",
        repeatable=True,
    ),
    "response-cache-byte-size": _int_flag(maximum=_INT64_MAX),
    # memory and devices
    "pinned-memory-pool-byte-size": _int_flag(maximum=_INT64_MAX),
    "cuda-memory-pool-byte-size": FlagSpec(
        _matching(r"\d+:\d+", "<gpu id>:<bytes>, e.g. 0:67108864"), "0:<bytes>", repeatable=True
    ),
    "cuda-virtual-address-size": FlagSpec(
        _matching(r"\d+:\d+", "<gpu id>:<bytes>"), "0:<bytes>", repeatable=True
    ),
    "min-supported-compute-capability": FlagSpec(_number(), "<float>, e.g. 6.0"),
    "buffer-manager-thread-count": _int_flag(),
    "model-load-gpu-limit": FlagSpec(
        _matching(r"\d+:(?:0?\.\d+|[01](?:\.0*)?)", "<gpu id>:<fraction>"),
        "0:<fraction>",
        repeatable=True,
    ),
    "enable-peer-access": _BOOL,
}

_PLATFORM_PLACES = " (the platform sets directories, ports and addresses)"
_FILES = " (it names a file outside the model repository)"
# Triton flags we know and refuse, with why; anything else is simply unknown.
REFUSED: dict[str, str] = {
    **dict.fromkeys(
        [
            "backend-directory",
            "repoagent-directory",
            "cache-directory",
            "http-port",
            "grpc-port",
            "metrics-port",
            "http-address",
            "grpc-address",
            "metrics-address",
            "reuse-http-port",
            "reuse-grpc-port",
            "allow-sagemaker",
            "sagemaker-port",
            "sagemaker-safe-port-range",
            "sagemaker-thread-count",
            "allow-vertex-ai",
            "vertex-ai-port",
            "vertex-ai-thread-count",
            "vertex-ai-default-model",
        ],
        _PLATFORM_PLACES,
    ),
    **dict.fromkeys(
        ["http-restricted-api", "grpc-restricted-protocol"],
        " (the platform decides which Triton APIs tenants reach)",
    ),
    **dict.fromkeys(
        [
            "log-file",
            "trace-file",
            "trace-config",
            "grpc-use-ssl",
            "grpc-use-ssl-mutual",
            "grpc-server-cert",
            "grpc-server-key",
            "grpc-root-cert",
        ],
        _FILES,
    ),
    "model-store": " (it is an alias: use --model-repository)",
}


def allowed_flags() -> str:
    """The allow-list as users type it, for error messages."""
    return ", ".join(f"--{name}" for name in sorted(ALLOWED))


@dataclass(frozen=True)
class TritonFlags:
    """Validated params: the model repository URI apart, the other flags normalised."""

    model_repository: str
    others: tuple[str, ...]  # ``--flag=value`` (or a bare switch), in the user's order

    def normalised(self, model_repository: str | None = None) -> list[str]:
        """Params in ``--flag=value`` form, optionally pointing at a local copy of the repo."""
        repository = self.model_repository if model_repository is None else model_repository
        return [f"--{MODEL_REPOSITORY}={repository}", *self.others]


def validate(params: Sequence[str]) -> list[str]:
    """Registry hook: the normalised params, or ProcessorError naming the bad one."""
    return parse(params).normalised()


def parse(params: Sequence[str]) -> TritonFlags:
    """Check every param against the allow-list; raise ProcessorError for the first bad one."""
    entries: list[_Entry] = []
    index = 0
    while index < len(params):
        name, value, after = _split(params, index)
        if not ALLOWED[name].repeatable and any(e.name == name for e in entries):
            raise _error(index, f"--{name} is given twice", fix=f"keep one --{name}")
        entries.append(_Entry(index, name, value))
        index = after
    return _assemble(entries)


@dataclass(frozen=True)
class _Entry:
    index: int  # position in processor_params, for the error's field
    name: str
    value: str | None  # checked and normalised; None for a switch

    def __str__(self) -> str:
        return f"--{self.name}" if self.value is None else f"--{self.name}={self.value}"


def _split(params: Sequence[str], index: int) -> tuple[str, str | None, int]:
    """One ``--flag=value`` / ``--flag value`` / ``--switch`` at ``index``: (name, checked
    value, next index)."""
    token = params[index]
    _refuse_typography(token, index)
    if not token.startswith("--") or len(token) == 2:
        raise _error(
            index,
            f"unexpected argument {token!r}: processor params are tritonserver flags",
            fix="write each as --flag=value, e.g. --model-repository=oss://<bucket>/<prefix>",
        )
    name, eq, value = token[2:].partition("=")
    spec = _spec(name, index)
    if spec.normalise is None:
        if eq:
            raise _error(index, f"--{name} takes no value", fix=f"type --{name}")
        return name, None, index + 1
    nxt = index + 1
    if not eq:
        if nxt >= len(params) or _looks_like_flag(params[nxt]):
            raise _error(index, f"--{name} needs a value", fix=f"type --{name}={spec.hint}")
        value, nxt = params[nxt], nxt + 1
    return name, _checked_value(name, spec.normalise, spec.hint, value, index), nxt


def _looks_like_flag(token: str) -> bool:
    return token[:1] in {"-", *_DASHES}


def _refuse_typography(token: str, index: int) -> None:
    """The seed's config came from a blog: "–flag" (en dash), "—flag", "-flag"."""
    lead = len(token) - len(token.lstrip("-" + _DASHES))
    prefix, rest = token[:lead], token[lead:]
    if not prefix or prefix == "--" or not rest:
        return
    fancy = [c for c in prefix if c in _DASHES]
    if fancy:
        what = _DASH_NAMES.get(fancy[0], f"a typographic dash (U+{ord(fancy[0]):04X})")
        problem = f"{token!r} starts with {what}, not two hyphens"
    else:
        problem = f"{token!r} starts with {len(prefix)} hyphen(s), not two"
    name, eq, value = rest.partition("=")
    raise _error(index, problem, fix=f"type --{name}{eq}{value.strip(_BLANKS)}")


def _spec(name: str, index: int) -> FlagSpec:
    if name in ALLOWED:
        return ALLOWED[name]
    listing = f"; allowed flags: {allowed_flags()}"
    if name in REFUSED:
        raise _error(
            index, f"--{name} is not allowed{REFUSED[name]}{listing}", fix=f"remove --{name}"
        )
    close = difflib.get_close_matches(name.lower().replace("_", "-"), ALLOWED, n=1, cutoff=0.75)
    fix = f"did you mean --{close[0]}?" if close else f"remove --{name}"
    raise _error(index, f"unknown flag --{name}{listing}", fix=fix)


def _checked_value(name: str, normalise: Normaliser, hint: str, value: str, index: int) -> str:
    bare = value.strip(_BLANKS)
    if bare != value:
        raise _error(
            index,
            f"the value of --{name} has quotes or spaces around it: {value!r}",
            fix=f"type --{name}={bare}",
        )
    try:
        return normalise(value)
    except ValueError as e:
        reason = str(e)
        # Name the value once: some reasons (the storage parser's) quote it already.
        said = f"--{name}" if value and value in reason else f"--{name}={value}"
        fix = e.fix if isinstance(e, _Invalid) else f"type --{name}={hint}"
        raise _error(index, f"{said}: {reason}", fix=fix) from None


def _assemble(entries: list[_Entry]) -> TritonFlags:
    """Checks across flags, then the normalised result."""

    def given(name: str) -> list[_Entry]:
        return [e for e in entries if e.name == name]

    repositories = given(MODEL_REPOSITORY)
    if not repositories or repositories[0].value is None:
        raise ProcessorError(
            f"--{MODEL_REPOSITORY} is required",
            field="processor_params",
            fix=f"add --{MODEL_REPOSITORY}=oss://<bucket>/<prefix>",
        )
    modes = given("model-control-mode")
    mode = modes[0].value if modes else "none"
    for name, needed in (("load-model", "explicit"), ("repository-poll-secs", "poll")):
        if given(name) and mode != needed:
            raise _error(
                given(name)[0].index,
                f"--{name} only works with --model-control-mode={needed}",
                fix=f"add --model-control-mode={needed} or remove --{name}",
            )
    loads = given("load-model")
    stars = [e for e in loads if e.value == "*"]
    if stars and len(loads) > 1:
        raise _error(
            stars[0].index, "--load-model=* must be the only --load-model", fix="keep just one"
        )
    for entry in given("allow-http"):
        if entry.value == "false":
            raise _error(
                entry.index,
                "--allow-http=false would make the service unreachable "
                "(the gateway and health checks use HTTP)",
                fix="remove --allow-http=false",
            )
    return TritonFlags(
        model_repository=repositories[0].value,
        others=tuple(str(e) for e in entries if e.name != MODEL_REPOSITORY),
    )


def _error(index: int, message: str, *, fix: str) -> ProcessorError:
    return ProcessorError(message, field=f"processor_params[{index}]", fix=fix)
