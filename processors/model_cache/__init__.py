"""The node-local model cache: one per Kubernetes node (a DaemonSet), shared by every
replica's pull on that node, so a scale-up where the model was pulled before downloads nothing
from OSS. :mod:`.server` serves :mod:`.store` over HTTP; the pull's side is
:mod:`processors.storage.node_cache`; :mod:`.lru` decides what goes when it is full."""
