"""The "settings" part of ``openeas <command> --help``: each environment variable a
deployable's settings class reads, with its default, generated from the class so the help
cannot drift from the code. The control plane's and the gateway's CLIs call it."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, SecretStr
from pydantic_settings import BaseSettings


def env_name(cls: type[BaseSettings], field: str) -> str:
    """The variable pydantic-settings reads for ``field``: an upper-case alias choice
    (shared names such as ``OPENEAS_ADMIN_TOKEN``), else prefix + field name."""
    alias = cls.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        for choice in alias.choices:
            if isinstance(choice, str) and choice.isupper():
                return choice
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def settings_epilog(cls: type[BaseSettings]) -> str:
    """One line per variable: ``NAME  default X — description``; secrets show no value,
    nested settings point at their own prefix."""
    lines = ["environment:"]
    for field, info in cls.model_fields.items():
        name = env_name(cls, field)
        default = info.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            nested = type(default).model_config.get("env_prefix", name + "_")
            lines.append(f"  {nested}*  see docs/configuration.md")
            continue
        shown = "(secret)" if isinstance(default, SecretStr) else str(default) or "empty"
        about = f" — {info.description.rstrip('.')}" if info.description else ""
        lines.append(f"  {name}  default {shown}{about}")
    return "\n".join(lines)
