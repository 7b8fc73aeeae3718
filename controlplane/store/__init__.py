"""Persistence: the tables and their migrations, the queries and operations on services,
groups, keys and the audit, and the change signals and route feed that commits move.
Imports only :mod:`controlplane.model` of the control plane: never the runtime, the
reconciler or the API."""
