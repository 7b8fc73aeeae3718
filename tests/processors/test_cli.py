"""``openeas`` dispatch and ``openeas processor …`` usage errors (in-process, no Triton)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from openeas import cli as openeas_cli
from processors import exits
from tests.fixtures_triton import EXAMPLE_MODELS


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("openeas: ")
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (["nope"], 2, "unknown command 'nope'; commands: "),
        (["processor", "run", "triton"], exits.BAD_PARAMS, "give the processor params after --"),
        (
            ["processor", "run", "tritn", "--", "--model-repository=/m"],
            exits.BAD_PARAMS,
            "unknown processor 'tritn'; use one of: triton",
        ),
        (
            ["processor", "run", "triton", "--", "–model-repository=/m"],
            exits.BAD_PARAMS,
            "processor_params[0]: '–model-repository=/m' starts with an en dash",
        ),
        (
            ["processor", "run", "triton", "--", "--model-repository=/m", "--http-port=1"],
            exits.BAD_PARAMS,
            "processor_params[1]: --http-port is not allowed",
        ),
        (
            ["processor", "run", "triton", "--", "--model-repository=/no/such/dir"],
            exits.PULL_PERMANENT,
            "model pull failed: model repository /no/such/dir is not a directory",
        ),
    ],
)
def test_failures_are_one_line_with_a_distinct_code(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int, words: str
) -> None:
    assert openeas_cli.main(argv) == code
    assert words in _one_line(capsys)


def test_missing_tritonserver_exits_127(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENEAS_TRITONSERVER", "/no/tritonserver")
    argv = ["processor", "run", "triton", "--", f"--model-repository={EXAMPLE_MODELS}"]
    assert openeas_cli.main(argv) == exits.NO_SERVER_BINARY
    assert "OPENEAS_TRITONSERVER=/no/tritonserver" in _one_line(capsys)


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert openeas_cli.main(["--help"]) == 0
    assert "processor" in capsys.readouterr().out.split("commands: ")[1]
    assert openeas_cli.main([]) == 2


def test_commands_are_lazy_module_function_strings() -> None:
    for name, target in openeas_cli.COMMANDS.items():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), (name, target)
    # Lazy: importing the entry point imports none of the command modules.
    modules = sorted({t.partition(":")[0] for t in openeas_cli.COMMANDS.values()})
    check = f"import sys, openeas.cli; print([m for m in {modules!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_pull_process_starts_without_what_it_does_not_use() -> None:
    """Not the model cache's HTTP server, nor pickle (a failed helper's) nor statistics'
    fractions and decimal: milliseconds of every pull's start."""
    unused = ["http.server", "socketserver", "pickle", "fractions", "decimal"]
    check = f"import sys, processors.cli; print([m for m in {unused!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_pull_copies_a_local_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "models"
    assert openeas_cli.main(["processor", "pull", str(EXAMPLE_MODELS), str(dest)]) == 0
    assert (dest / "add_sub" / "config.pbtxt").read_bytes() == (
        EXAMPLE_MODELS / "add_sub" / "config.pbtxt"
    ).read_bytes()
    assert capsys.readouterr().out.startswith(f"pulled {EXAMPLE_MODELS} into {dest}: ")


def test_pull_failure_is_permanent_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OSS_ENDPOINT", raising=False)
    argv = ["processor", "pull", "oss://bucket/models", str(tmp_path / "m")]
    assert openeas_cli.main(argv) == exits.PULL_PERMANENT
    line = _one_line(capsys)
    assert "model pull failed: " in line and "OSS_ENDPOINT" in line
