"""The OpenEAS gateway: ``/api/predict/<service>/…`` → a ready Triton replica.

Entry points: :func:`gateway.app.start_gateway` (embeddable; ``openeas up`` uses it) and
``openeas gateway`` (:func:`gateway.cli.main`). Route tables come from a
:class:`gateway.route_table.RouteSource`. Never imports ``controlplane``: the only shared
contract is :mod:`contract.wire`.
"""
