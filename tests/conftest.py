"""Shared pytest set-up: each area keeps its fixtures in its own plugin module."""

pytest_plugins = [
    "tests.fixtures_db",
    "tests.fixtures_oss",
    "tests.fixtures_triton",
]
