"""``eascmd completion``: a bash (and zsh, through bashcompinit) completion script, generated
from the CLI's own parser so it offers exactly the commands and options that exist."""

from __future__ import annotations

import argparse

_TEMPLATE = """# eascmd completion: add eval "$(eascmd completion)" to ~/.bashrc
_eascmd() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} opts
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "{commands}" -- "$cur"))
        return
    fi
    case ${{COMP_WORDS[1]}} in
{cases}
        *) opts="" ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _eascmd eascmd
"""


ZSH_PRELUDE = "autoload -U +X bashcompinit && bashcompinit\n"


def script(parser: argparse.ArgumentParser, shell: str = "bash") -> str:
    return (ZSH_PRELUDE if shell == "zsh" else "") + bash(parser)


def bash(parser: argparse.ArgumentParser) -> str:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cases = []
    for name, command in sub.choices.items():
        flags = [f for a in command._actions for f in a.option_strings if f.startswith("--")]
        cases.append(f'        {name}) opts="{" ".join(flags)}" ;;')
    return _TEMPLATE.format(commands=" ".join(sub.choices), cases="\n".join(cases))
