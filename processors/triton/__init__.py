"""The ``triton`` processor: NVIDIA Triton Inference Server with the tenant's model repository.

The registry loads :data:`processors.triton.processor.PROCESSOR`. Modules: ``flags`` (which
tritonserver flags a tenant may pass), ``plan`` (the replica a runtime starts), ``binary``
(where tritonserver is), ``supervisor`` (PID-1-friendly child process) and ``run``
(``openeas processor run triton``, using :mod:`processors.repository` for the model pull).
This package module imports nothing, so importing one of them does not import the others.
"""
