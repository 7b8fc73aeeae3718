"""The ``triton`` processor as the registry loads it (``processors.registry.BUILTIN``)."""

from __future__ import annotations

from processors.base import Processor
from processors.triton import flags, plan, run

PROCESSOR = Processor(
    name="triton",
    validate=flags.validate,
    plan=plan.plan,
    run=run.run,
    image_args=run.platform_args,
)
