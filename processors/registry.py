"""Processor registry: what a replica runs, by processor name.

The control plane calls :func:`get` to validate ``processor_params`` at create/update time
and to compute each replica's :class:`~processors.base.ReplicaPlan`; runtimes (local,
kubernetes) turn a plan into a process or a container. Processors are named here by import
path and loaded on first use, so the registry depends on no processor package.
"""

from __future__ import annotations

import importlib

from processors.base import Processor, ProcessorError

BUILTIN = {"triton": "processors.triton.processor:PROCESSOR"}

_LOADED: dict[str, Processor] = {}


def register(processor: Processor) -> None:
    """Add a processor that is not built in (a plugin, or a test's stand-in)."""
    _LOADED[processor.name] = processor


def names() -> list[str]:
    return sorted(BUILTIN.keys() | _LOADED.keys())


def get(name: str) -> Processor:
    """The processor called ``name``; ProcessorError naming the known ones otherwise."""
    if name not in _LOADED:
        if name not in BUILTIN:
            known = ", ".join(names())
            raise ProcessorError(
                f"unknown processor {name!r}", field="processor", fix=f"use one of: {known}"
            )
        module, _, attribute = BUILTIN[name].partition(":")
        processor = getattr(importlib.import_module(module), attribute)
        assert isinstance(processor, Processor)
        _LOADED[name] = processor
    return _LOADED[name]
