"""processors.triton.flags: the tritonserver flags a tenant may pass (pure, table-style)."""

from __future__ import annotations

import pytest

from processors import registry
from processors.base import ProcessorError
from processors.triton import flags

REPO = "--model-repository=oss://triton-model-repo/models"

ACCEPTED: list[tuple[list[str], list[str] | None]] = [
    # the seed, typed correctly
    ([REPO, "--allow-http=true"], [REPO, "--allow-http=true"]),
    # bucket root, file URI, absolute path
    (["--model-repository=oss://bucket"], ["--model-repository=oss://bucket"]),
    (["--model-repository=oss://bucket/"], ["--model-repository=oss://bucket/"]),
    (["--model-repository=file:///srv/models"], ["--model-repository=file:///srv/models"]),
    (["--model-repository=/srv/models"], ["--model-repository=/srv/models"]),
    # "--flag value" form becomes "--flag=value"
    (
        ["--model-repository", "/m", "--log-verbose", "1", "--backend-config", "python,a=b"],
        ["--model-repository=/m", "--log-verbose=1", "--backend-config=python,a=b"],
    ),
    # booleans as Triton reads them (true/false/on/off/1/0, any case) become true/false
    (
        [REPO, "--strict-readiness=ON", "--exit-on-error=0", "--log-info", "False"],
        [REPO, "--strict-readiness=true", "--exit-on-error=false", "--log-info=false"],
    ),
    # integers in canonical form, enums in Triton's spelling, floats as given
    (
        [REPO, "--http-thread-count=+08", "--log-format=iso8601", "--rate-limit=OFF"],
        [REPO, "--http-thread-count=8", "--log-format=ISO8601", "--rate-limit=off"],
    ),
    ([REPO, "--min-supported-compute-capability=6.0"], None),
    ([REPO, "--pinned-memory-pool-byte-size=268435456"], None),
    ([REPO, "--cuda-memory-pool-byte-size=0:67108864", "--cuda-memory-pool-byte-size=1:0"], None),
    ([REPO, "--buffer-manager-thread-count=4", "--exit-timeout-secs=5"], None),
    ([REPO, "--backend-config=default-max-batch-size=8"], None),
    ([REPO, "--cache-config=local,size=1048576", "--response-cache-byte-size=1024"], None),
    ([REPO, "--allow-grpc=false", "--allow-metrics=false", "--strict-model-config=true"], None),
    ([REPO, "--log-warning=true", "--log-error=true", "--disable-auto-complete-config"], None),
    # model control
    ([REPO, "--model-control-mode=explicit", "--load-model=a", "--load-model=b"], None),
    ([REPO, "--model-control-mode=explicit", "--load-model=*"], None),
    ([REPO, "--model-control-mode=poll", "--repository-poll-secs=30"], None),
    ([REPO, "--model-config-name=h100"], None),
    # the repository need not come first; order is kept
    (["--log-verbose=1", REPO], [REPO, "--log-verbose=1"]),
]


@pytest.mark.parametrize(("params", "normalised"), ACCEPTED)
def test_accepted(params: list[str], normalised: list[str] | None) -> None:
    assert flags.validate(params) == (params if normalised is None else normalised)


def test_normalised_is_a_fixed_point() -> None:
    for params, _ in ACCEPTED:
        once = flags.validate(params)
        assert flags.validate(once) == once


def test_parse_points_the_repository_at_a_local_copy() -> None:
    parsed = flags.parse(["--log-verbose", "1", REPO])
    assert parsed.model_repository == "oss://triton-model-repo/models"
    assert parsed.normalised("/cache/m") == ["--model-repository=/cache/m", "--log-verbose=1"]


# (params, field, words in the message, the fix)
REFUSED: list[tuple[list[str], str, str, str]] = [
    # the seed's blog typography
    (
        ["–model-repository=oss://triton-model-repo/models"],
        "processor_params[0]",
        "en dash",
        "type --model-repository=oss://triton-model-repo/models",
    ),
    ([REPO, "—allow-http=true"], "processor_params[1]", "em dash", "type --allow-http=true"),
    (
        ["–model-repository=“oss://bucket/m”"],
        "processor_params[0]",
        "en dash",
        "type --model-repository=oss://bucket/m",
    ),
    (["-model-repository=/m"], "processor_params[0]", "1 hyphen", "type --model-repository=/m"),
    (
        ["--model-repository=“oss://bucket/m”"],
        "processor_params[0]",
        "quotes",
        "type --model-repository=oss://bucket/m",
    ),
    # values
    ([REPO, "--strict-readiness"], "processor_params[1]", "needs a value", "=true"),
    (
        [REPO, "--strict-readiness", "--log-info=true"],
        "processor_params[1]",
        "needs a value",
        "type --strict-readiness=true",
    ),
    ([REPO, "--allow-http=yes"], "processor_params[1]", "true or false", "--allow-http=true"),
    ([REPO, "--log-verbose=lots"], "processor_params[1]", "whole number", "<integer>"),
    ([REPO, "--http-thread-count=0"], "processor_params[1]", "from 1", "<integer>"),
    ([REPO, "--log-verbose=99999999999"], "processor_params[1]", "to 2147483647", "<integer>"),
    ([REPO, "--model-control-mode=auto"], "processor_params[1]", "none, poll, explicit", ""),
    ([REPO, "--cuda-memory-pool-byte-size=64"], "processor_params[1]", "<gpu id>:<bytes>", ""),
    ([REPO, "--min-supported-compute-capability=x"], "processor_params[1]", "number", ""),
    ([REPO, "--disable-auto-complete-config=true"], "processor_params[1]", "takes no value", ""),
    ([REPO, "--cache-config=redis,host=x"], "processor_params[1]", "local cache", ""),
    # paths outside the repository, and shared memory of other replicas
    ([REPO, "--model-config-name=../../etc"], "processor_params[1]", "file path", ""),
    ([REPO, "--backend-config=python,x=/etc/passwd"], "processor_params[1]", "file path", ""),
    (
        [REPO, "--backend-config=python,shm-region-prefix-name=other"],
        "processor_params[1]",
        "platform's",
        "remove",
    ),
    # the model repository itself
    ([], "processor_params", "is required", "add --model-repository=oss://"),
    (["--log-verbose=1"], "processor_params", "is required", ""),
    ([REPO, "--model-repository=/m"], "processor_params[1]", "given twice", "keep one"),
    (["--model-repository=models"], "processor_params[0]", "relative", ""),
    (["--model-repository=s3://bucket/m"], "processor_params[0]", "unsupported scheme", ""),
    (["--model-repository=oss://Bucket/m"], "processor_params[0]", "invalid bucket", ""),
    (["--model-repository=file://host/m"], "processor_params[0]", "names a host", ""),
    (["--model-repository"], "processor_params[0]", "needs a value", ""),
    # combinations
    ([REPO, "--log-verbose=1", "--log-verbose=2"], "processor_params[2]", "given twice", ""),
    ([REPO, "--load-model=a"], "processor_params[1]", "model-control-mode=explicit", ""),
    (
        [REPO, "--model-control-mode=explicit", "--load-model=a", "--load-model=*"],
        "processor_params[3]",
        "only --load-model",
        "",
    ),
    ([REPO, "--repository-poll-secs=5"], "processor_params[1]", "model-control-mode=poll", ""),
    ([REPO, "--allow-http=false"], "processor_params[1]", "unreachable", "remove"),
    # not flags at all
    ([REPO, "oss://bucket/m"], "processor_params[1]", "unexpected argument", "--flag=value"),
    ([REPO, "--"], "processor_params[1]", "unexpected argument", ""),
    (["--model-repository", "--log-verbose=1"], "processor_params[0]", "needs a value", ""),
]


@pytest.mark.parametrize(("params", "field", "words", "fix"), REFUSED)
def test_refused(params: list[str], field: str, words: str, fix: str) -> None:
    with pytest.raises(ProcessorError) as caught:
        flags.validate(params)
    assert caught.value.field == field
    assert words in str(caught.value)
    assert fix in caught.value.fix
    assert "\n" not in caught.value.one_line()


ESCAPES = [
    "--backend-directory=/tmp/evil",
    "--repoagent-directory=/tmp/evil",
    "--cache-directory=/tmp/evil",
    "--http-port=80",
    "--grpc-port=81",
    "--metrics-port=82",
    "--http-address=0.0.0.0",
    "--grpc-address=0.0.0.0",
    "--metrics-address=0.0.0.0",
    "--http-restricted-api=model-repository,admin=1",
    "--grpc-restricted-protocol=model-repository,admin=1",
    "--log-file=/etc/cron.d/x",
    "--trace-config=triton,file=/tmp/t",
    "--allow-sagemaker=true",
    "--model-store=/m",
]


@pytest.mark.parametrize("escape", ESCAPES)
def test_platform_flags_are_refused_with_the_allow_list(escape: str) -> None:
    name = escape.split("=")[0]
    with pytest.raises(ProcessorError) as caught:
        flags.validate([REPO, escape])
    message = str(caught.value)
    assert caught.value.field == "processor_params[1]"
    assert f"{name} is not allowed" in message
    assert f"allowed flags: {flags.allowed_flags()}" in message
    assert caught.value.fix == f"remove {name}"


def test_unknown_flag_suggests_the_closest_allowed_one() -> None:
    with pytest.raises(ProcessorError) as caught:
        flags.validate(["--model_repository=/m"])
    assert "unknown flag --model_repository; allowed flags: --allow-cpu-metrics" in str(
        caught.value
    )
    assert caught.value.fix == "did you mean --model-repository?"


def test_allow_list_covers_eas_documented_flags() -> None:
    eas = [
        "model-repository",
        "log-verbose",
        "log-info",
        "log-warning",
        "log-error",
        "exit-on-error",
        "strict-model-config",
        "strict-readiness",
        "allow-http",
        "allow-grpc",
        "allow-metrics",
        "http-thread-count",
        "pinned-memory-pool-byte-size",
        "cuda-memory-pool-byte-size",
        "min-supported-compute-capability",
        "buffer-manager-thread-count",
        "backend-config",
        "model-control-mode",
        "load-model",
        "repository-poll-secs",
        "exit-timeout-secs",
        "rate-limit",
        "response-cache-byte-size",
        "cache-config",
    ]
    assert set(eas) <= set(flags.ALLOWED)
    assert not set(flags.ALLOWED) & set(flags.REFUSED)


def test_registry_serves_the_triton_processor() -> None:
    processor = registry.get("triton")
    assert processor.validate is flags.validate
    assert processor.run is not None
    assert "triton" in registry.names()
