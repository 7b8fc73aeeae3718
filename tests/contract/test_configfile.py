"""Reading pasted service configs: the seed's typographic damage is named precisely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract import configfile

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_triton.config"


def test_clean_json_parses() -> None:
    assert configfile.parse('{"name": "a", "metadata": {"instance": 1}}') == {
        "name": "a",
        "metadata": {"instance": 1},
    }


def test_the_seed_config_gets_every_problem_and_the_corrected_lines() -> None:
    text = SEED.read_text()
    with pytest.raises(configfile.ConfigSyntaxError) as info:
        configfile.parse(text)
    err = info.value
    kinds = [p.message.split(" ")[0] for p in err.problems]
    assert kinds.count("typographic") == 28
    assert kinds.count("dash") == 2
    assert kinds.count("trailing") == 1
    assert err.fixed_lines[5].strip() == '"--model-repository=oss://triton-model-repo/models",'
    assert err.fixed_lines[6].strip() == '"--allow-http=true"'  # trailing comma gone
    # Applying every suggested line gives the config the user meant.
    repaired = "\n".join(
        err.fixed_lines.get(i, line) for i, line in enumerate(text.splitlines(), start=1)
    )
    assert json.loads(repaired)["processor_params"] == [
        "--model-repository=oss://triton-model-repo/models",
        "--allow-http=true",
    ]
    rendered = err.render("triton.config", text)
    assert "triton.config:6:19: trailing comma before ]: remove it" in rendered
    assert "triton.config:5:2: dash – before a flag: type -- instead" in rendered
    assert (
        'typographic quotes “ ” (columns 1, 6, 9, 21): type straight quotes " instead' in rendered
    )


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ('{"a": 1,}', 1, 8, "trailing comma before }"),
        ('{"a": [1, 2,\n]}', 1, 12, "trailing comma before ]"),
        ('{"a": 1\n "b": 2}', 2, 2, "Expecting ','"),
        ('{"a": "x, ]"}x', 1, 14, "Extra data"),
    ],
)
def test_other_json_errors_have_line_and_column(
    text: str, line: int, column: int, words: str
) -> None:
    with pytest.raises(configfile.ConfigSyntaxError) as info:
        configfile.parse(text)
    (problem,) = info.value.problems
    assert (problem.line, problem.column) == (line, column)
    assert words in problem.message


def test_commas_and_dashes_inside_strings_are_not_problems() -> None:
    assert configfile.parse('{"a": "x, ]", "b": "a – b"}') == {"a": "x, ]", "b": "a – b"}
