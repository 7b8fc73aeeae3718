"""Async services: EAS's queue protocol (:mod:`gateway.queue.door`), on Redis Streams
(:mod:`gateway.queue.streams`, the only module that imports redis), consumed for the
replicas by the gateway itself (:mod:`gateway.queue.consumer`)."""
