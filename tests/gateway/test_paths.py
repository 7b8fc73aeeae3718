"""Request-target parsing and the admin-surface check (pure)."""

from __future__ import annotations

import pytest

from gateway.routing.paths import BadTarget, is_admin_path, normalize_segments, parse_target


@pytest.mark.parametrize(
    ("raw", "service", "path_qs"),
    [
        ("/api/predict/svc/v2/models/m/infer", "svc", "/v2/models/m/infer"),
        ("/api/predict/svc/v2/models/m/infer?a=1&b=%2F", "svc", "/v2/models/m/infer?a=1&b=%2F"),
        ("/api/predict/svc", "svc", "/"),
        ("/api/predict/svc/v2", "svc", "/v2"),
        ("/api/predict/svc//v2/./models/m/", "svc", "/v2/models/m"),
        ("/api/predict/a/../b/v2/health/ready", "b", "/v2/health/ready"),
        ("/api/predict/svc/v2/models/m%20x/ready", "svc", "/v2/models/m%20x/ready"),
        ("/api/predict/svc/v2/models/%C3%A9/ready", "svc", "/v2/models/%C3%A9/ready"),
        ("/x/../api/predict/svc/v2", "svc", "/v2"),
        ("/api/%70redict/svc/v2", "svc", "/v2"),
    ],
)
def test_predict_targets(raw: str, service: str, path_qs: str) -> None:
    target = parse_target(raw)
    assert target is not None
    assert (target.service, target.path_qs) == (service, path_qs)


@pytest.mark.parametrize(
    "raw",
    ["/", "/metrics", "/api/predict/", "/api/predict", "/api/v2/services", "/gateway/healthz"],
)
def test_not_predict(raw: str) -> None:
    assert parse_target(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        "/api/predict/svc/v2/models/a%2Fb/infer",  # encoded separator
        "/api/predict/svc/v2/models/a%5Cb/infer",  # encoded backslash
        "/api/predict/svc/v2/models/a%00/infer",  # NUL
        "/api/predict/svc/v2/models/%ff/infer",  # not UTF-8
    ],
)
def test_malformed_predict_paths_are_refused(raw: str) -> None:
    with pytest.raises(BadTarget):
        parse_target(raw)


def test_dot_segments_clamp_at_root() -> None:
    assert normalize_segments("/../../a/./b/../c") == ["a", "c"]


@pytest.mark.parametrize(
    "path",
    [
        "/v2/repository/index",
        "/v2/repository/models/m/load",
        "/v2/repository/models/m/unload",
        "/v2/systemsharedmemory/status",
        "/v2/systemsharedmemory/region/r/register",
        "/v2/cudasharedmemory/region/r/unregister",
        "/v2/trace/setting",
        "/v2/models/m/trace/setting",
        "/v2/models/m/versions/1/trace/setting",
        "/v2/logging",
        "/V2/Repository/index",
        "/v2/models/../repository/index",
        "/v2/%72epository/index",
        "/v2/./logging",
        "//v2//trace/setting",
    ],
)
def test_admin_surface(path: str) -> None:
    target = parse_target("/api/predict/svc" + path)
    assert target is not None
    assert is_admin_path(target.segments) and target.admin


@pytest.mark.parametrize(
    "path",
    [
        "/v2",
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/m",
        "/v2/models/m/ready",
        "/v2/models/m/config",
        "/v2/models/m/infer",
        "/v2/models/m/versions/1/infer",
        "/v2/models/m/stats",
        "/v2/models/trace/infer",  # a model named "trace" is fine
        "/v2/models/repository/config",
    ],
)
def test_tenant_surface(path: str) -> None:
    target = parse_target("/api/predict/svc" + path)
    assert target is not None
    assert not is_admin_path(target.segments) and not target.admin
