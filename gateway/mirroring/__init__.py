"""Traffic mirroring: a copy of a predict call sent to shadow services off the caller's path
(:mod:`.mirror`, :mod:`.shadows`), their answers compared with the primary's
(:mod:`.compare`).
"""
