"""Shared pytest set-up: each area keeps its fixtures in its own plugin module; this file
holds the suite-wide rules (timeouts, what ``slow`` means, no skip in CI)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

# EAS's prediction SDK ships protobuf code generated for protobuf 3; tritonclient needs
# protobuf 6. Protobuf's pure-Python codec reads both: chosen before anything imports it.
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

pytest_plugins = [
    "tests.fixtures_db",
    "tests.fixtures_oss",
    "tests.fixtures_triton",
]

# Per-test bound for tests marked slow (the fast ones get pyproject's `timeout`): the
# end-to-end journey takes about a minute and a half on a loaded 2-core machine.
SLOW_TEST_TIMEOUT = 420
# Fixtures that start real Triton: a test using one must be marked slow, so that
# `-m "not slow"` never starts tritonserver.
TRITON_FIXTURES = {"triton_server"}


# In CI (``CI=true``, as CI services set it; ``.ci/run`` too) every test runs: a skip there
# would hide a test that no longer runs anywhere, so it fails the run instead.
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where no test may skip: {reason}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = []
    for item in items:
        if item.get_closest_marker("slow") is None:
            if TRITON_FIXTURES.intersection(getattr(item, "fixturenames", ())):
                unmarked.append(item.nodeid)
        elif item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT))
    if unmarked:
        raise pytest.UsageError(f"these start real Triton but are not marked slow: {unmarked}")


@pytest.fixture
def unfrozen_heap() -> Iterator[None]:
    """For a test of a server's start-up freeze (startup.heap): the suite's own heap is not
    a server's start-up, so it is unfrozen again after."""
    gc.unfreeze()
    yield
    gc.unfreeze()
