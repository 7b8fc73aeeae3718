"""The OpenEAS gateway: ``/api/predict/<service>/…`` → a ready Triton replica.

Entry points: :func:`gateway.app.start_gateway` (embeddable; ``openeas up`` uses it) and
``openeas gateway`` (:func:`gateway.cli.main`). Route tables come from a
:class:`gateway.route_source.RouteSource`. Never imports ``controlplane``: the only shared
contract is :mod:`contract.wire`.
"""

from gateway.native import use_sources_if_needed

use_sources_if_needed()  # before any compiled module is imported (see gateway.native)
