"""Reading the service config file a user hands to ``eascmd create``/``modify`` (and to
``openeas manifests``).

Users paste configs from blogs and chat, so besides JSON errors we name the usual
typographic damage — curly quotes, an en dash where ``--`` was meant, trailing commas — with
line, column and the corrected line, and create nothing. Pure but for :func:`read_config`,
which reads the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOUBLE_QUOTES = "“”„‟″＂"  # typographic stand-ins for "
DASHES = "–—‒−"  # en, em, figure dash, minus: a pasted "--"
QUOTE = "typographic quote "  # message prefix; render() merges these per line


@dataclass(frozen=True)
class Problem:
    line: int
    column: int
    message: str


class ConfigSyntaxError(ValueError):
    def __init__(self, problems: list[Problem], fixed_lines: dict[int, str]) -> None:
        self.problems = problems
        self.fixed_lines = fixed_lines  # line number -> the line as it should read
        super().__init__(f"{len(problems)} problem(s)")

    def render(self, filename: str, text: str) -> str:
        lines = text.splitlines()
        out = [f"{filename} is not valid JSON; nothing was created or changed."]
        for number in sorted({p.line for p in self.problems}):
            here = [p for p in self.problems if p.line == number]
            quotes = [p for p in here if p.message.startswith(QUOTE)]
            if quotes:
                chars = " ".join(dict.fromkeys(p.message[len(QUOTE) :] for p in quotes))
                columns = ", ".join(str(p.column) for p in quotes)
                out.append(
                    f"  {filename}:{number}:{quotes[0].column}: typographic quotes {chars} "
                    f'(columns {columns}): type straight quotes " instead'
                )
            out += [
                f"  {filename}:{p.line}:{p.column}: {p.message}" for p in here if p not in quotes
            ]
            if number <= len(lines):  # not at the end of the text, after its last line
                out.append(f"      {lines[number - 1].strip()}")
            if number in self.fixed_lines:
                out.append(f"    should read:\n      {self.fixed_lines[number].strip()}")
        return "\n".join(out)


class ConfigFileError(ValueError):
    """The file cannot be read or is no JSON object; the message names the file and, for JSON
    damage, every problem with the line as it should read. Callers prefix their program name."""


def read_config(file: str) -> dict[str, Any]:
    """The JSON object in ``file`` (UTF-8, a BOM allowed)."""
    try:
        text = Path(file).read_text(encoding="utf-8-sig")
    except OSError as e:
        raise ConfigFileError(f"cannot read {file}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigFileError(f"{file} is not UTF-8 text (byte {e.start})") from e
    try:
        value = parse(text)
    except ConfigSyntaxError as e:
        raise ConfigFileError(e.render(file, text)) from e
    if not isinstance(value, dict):
        raise ConfigFileError(f"{file} must hold a JSON object {{...}}")
    return value


def parse(text: str) -> Any:
    """The JSON value in ``text``, or ConfigSyntaxError naming every problem found."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        problems, fixed = _scan(text)
        if not problems:
            problems = [Problem(e.lineno, e.colno, e.msg)]
        raise ConfigSyntaxError(problems, fixed) from None


def repaired(text: str, error: ConfigSyntaxError) -> str:
    """``text`` with each line ``error`` could fix as it should read (line endings kept), for
    ``eascmd lint --fix``; parse the result again, as some damage has no single fix."""
    lines = text.splitlines(keepends=True)
    for number, fixed in error.fixed_lines.items():
        old = lines[number - 1]
        lines[number - 1] = fixed + old[len(old.rstrip("\r\n")) :]
    return "".join(lines)


def _scan(text: str) -> tuple[list[Problem], dict[int, str]]:
    """Walk the text as JSON would, reading typographic quotes as quotes, and collect the
    problems plus each affected line as it should read."""
    problems: list[Problem] = []
    repaired: list[str] = []
    cuts: dict[int, list[int]] = {}  # line -> indexes (in the repaired line) of commas to drop
    trailing: tuple[int, int, int] | None = None  # last comma outside strings: line, col, index
    in_string = escaped = string_start = False
    for number, line in enumerate(text.splitlines(), start=1):
        out: list[str] = []
        length = 0  # characters in out so far (a dash becomes two)
        for column, ch in enumerate(line, start=1):
            if in_string and escaped:
                escaped = False
            elif ch in DOUBLE_QUOTES or ch == '"':
                if ch != '"':
                    problems.append(Problem(number, column, QUOTE + ch))
                    ch = '"'
                in_string = string_start = not in_string
            elif in_string:
                escaped = ch == "\\"
                if ch in DASHES and string_start:
                    problems.append(
                        Problem(number, column, f"dash {ch} before a flag: type -- instead")
                    )
                    ch = "--"
                string_start = False
            elif ch in "]}" and trailing is not None:
                t_line, t_col, t_index = trailing
                problems.append(Problem(t_line, t_col, f"trailing comma before {ch}: remove it"))
                cuts.setdefault(t_line, []).append(t_index)
            if not in_string and ch == ",":
                trailing = (number, column, length)
            elif not in_string and not ch.isspace() and ch not in '"':
                trailing = None
            out.append(ch)
            length += len(ch)
        repaired.append("".join(out))
    fixed = {}
    for number in {p.line for p in problems}:
        line = repaired[number - 1]
        for index in sorted(cuts.get(number, []), reverse=True):
            line = line[:index] + line[index + 1 :]
        fixed[number] = line
    return problems, fixed
