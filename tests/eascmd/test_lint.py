"""``eascmd lint``: the config file's diagnostics without a server, and --fix writing the
corrected JSON (beside the file, or in place) with the diff — never a silent change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eascmd import cli

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_triton.config"


def lint(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(["lint", *argv])
    return code, capsys.readouterr().out


@pytest.fixture
def pasted(tmp_path: Path) -> Path:
    copy = tmp_path / "triton.config"
    copy.write_bytes(SEED.read_bytes())
    return copy


def test_lint_reports_without_changing_anything(
    pasted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = lint(capsys, str(pasted))
    assert code == 1
    assert f"{pasted}:5:2: dash – before a flag: type -- instead" in out
    assert '"--model-repository=oss://triton-model-repo/models",' in out
    assert f"eascmd lint {pasted} --fix" in out
    assert pasted.read_bytes() == SEED.read_bytes()
    assert sorted(p.name for p in pasted.parent.iterdir()) == ["triton.config"]


def test_fix_writes_the_corrected_json_beside_it_and_shows_the_diff(
    pasted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = lint(capsys, str(pasted), "--fix")
    assert code == 0
    fixed = pasted.parent / "triton.fixed.config"
    assert json.loads(fixed.read_text())["processor_params"] == [
        "--model-repository=oss://triton-model-repo/models",
        "--allow-http=true",
    ]
    assert pasted.read_bytes() == SEED.read_bytes()  # the original stays as it was
    assert f"+++ {fixed}" in out
    assert "-“–allow-http=true”,\n" in out and '+"--allow-http=true"\n' in out  # comma gone
    assert f"[OK] wrote {fixed}: 'eascmd create {fixed}'" in out
    assert lint(capsys, str(fixed)) == (0, f"[OK] {fixed} is valid: 'eascmd create {fixed}'\n")


def test_in_place_overwrites_the_file_and_keeps_its_line_endings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.json"
    config.write_bytes("{\r\n  “name”: “a”,\r\n}\r\n".encode())
    code, out = lint(capsys, str(config), "--fix", "--in-place")
    assert code == 0 and "--- " in out
    assert config.read_bytes() == b'{\r\n  "name": "a"\r\n}\r\n'
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_damage_without_a_safe_fix_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.json"
    config.write_text('{"name": "a" "processor": "triton"}')  # a missing comma: no guess
    code, out = lint(capsys, str(config), "--fix")
    assert code == 1 and "c.json:1:14" in out
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_missing_file_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["lint", str(tmp_path / "nope.config")]) == 2
    assert "cannot read" in capsys.readouterr().err
