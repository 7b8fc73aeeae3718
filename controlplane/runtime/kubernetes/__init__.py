"""The kubernetes runtime: each service becomes a Deployment and a Service in one namespace.

``controlplane.runtime.make_runtime`` builds :class:`~.runtime.KubernetesRuntime` when
``OPENEAS_RUNTIME=kubernetes``; ``openeas manifests`` prints what it would apply. Only
:mod:`.client` imports the ``kubernetes`` package, so the pure parts (:mod:`.settings`,
:mod:`.manifests`) load without it.
"""
