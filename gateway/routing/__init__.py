"""What both doors route by, with no I/O: the route table and its service groups
(:mod:`.route_table`, :mod:`.traffic`), predict paths (:mod:`.paths`), replica choice
(:mod:`.balancer`), token digests (:mod:`.auth`) and per-service limits (:mod:`.limits`).
Nothing here imports a door.
"""
