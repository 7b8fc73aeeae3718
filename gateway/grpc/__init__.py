"""The gRPC door: Triton's ``inference.GRPCInferenceService`` relayed as HTTP/2 frames
(:mod:`.relay`, :mod:`.h2wire`, :mod:`.hpack_codec`), what a call may do (:mod:`.rules`) and
the door itself (:mod:`.server`), which asks :mod:`gateway.admission` whether a call passes
and maps each refusal to its gRPC status.
"""
