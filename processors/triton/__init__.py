"""The ``triton`` processor: NVIDIA Triton Inference Server with the tenant's model repository.

The processor registry imports this package for :data:`PROCESSOR`. Modules: ``flags`` (which
tritonserver flags a tenant may pass), ``plan`` (the replica a runtime starts), ``binary``
(where tritonserver is), ``supervisor`` (PID-1-friendly child process) and ``run``
(``openeas processor run triton``, using :mod:`processors.repository` for the model pull).
"""

from __future__ import annotations

from processors.registry import Processor
from processors.triton import flags, plan, run

PROCESSOR = Processor(name="triton", validate=flags.validate, plan=plan.plan, run=run.run)

__all__ = ["PROCESSOR"]
