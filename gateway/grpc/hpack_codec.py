"""HPACK decoding for the gRPC relay: the one module that imports ``hpack``.

A gRPC client's encoder sends the same few headers on every call, after the first call
as indexed fields and literals it does not index (the token). Such a block changes no
decoder state, so its decoding can be remembered by its bytes until a block that does
change state arrives; a steady stream of calls then costs one dict look-up per header
block instead of a pure-Python decode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import hpack

from gateway.grpc.h2wire import ProtocolError, state_neutral

T = TypeVar("T")

Fields = tuple[tuple[bytes, bytes], ...]

_CACHED_BLOCKS = 256
_CACHED_BLOCK_BYTES = 2048  # a client's steady per-call block is ~100 bytes: bounds memory
MAX_HEADER_LIST = 65_536


class BlockDecoder(Generic[T]):
    """One connection's HPACK decoder, caching ``digest(fields)`` of state-neutral blocks;
    ``digest`` turns decoded fields into what the relay needs of them."""

    def __init__(self, digest: Callable[[Fields], T]) -> None:
        self._decoder = hpack.Decoder()
        self._decoder.max_header_list_size = MAX_HEADER_LIST
        self._digest = digest
        self._cache: dict[bytes, T] = {}

    def decode(self, block: bytes) -> T:
        hit = self._cache.get(block)
        if hit is not None:
            return hit
        try:
            fields = tuple((bytes(k), bytes(v)) for k, v in self._decoder.decode(block, raw=True))
        except hpack.HPACKError as e:
            raise ProtocolError(f"header block: {e}") from e
        result = self._digest(fields)
        if not state_neutral(block):
            self._cache.clear()  # the table changed: remembered indices may mean other fields
        elif len(block) <= _CACHED_BLOCK_BYTES:
            if len(self._cache) >= _CACHED_BLOCKS:
                self._cache.clear()
            self._cache[block] = result
        return result
