"""The HTTP/1.1 door: the client-facing server (:mod:`.server`, :mod:`.listener`), the request
router, the predict proxy (its callbacks in :mod:`.proxy`, its coroutines in
:mod:`.forwarding`), and the byte-level work both ways (:mod:`.upstream`, :mod:`.pool`,
:mod:`.writes`, :mod:`.splice`). Who is refused, and why, is not decided here but in
:mod:`gateway.admission`; this wing maps each refusal to its HTTP status.
"""
