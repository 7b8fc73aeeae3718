"""The gRPC relay's HTTP/2 pieces as tables: frame heads, control frames, header blocks
that leave HPACK state alone (checked by decoding them with ``hpack``), the state-neutral
test the decode cache relies on, and gRPC's timeouts and statuses."""

from __future__ import annotations

from typing import cast

import hpack
import pytest

from gateway.grpc import h2wire as h2
from gateway.grpc.hpack_codec import BlockDecoder, Fields


def text_fields(block: bytes, decoder: hpack.Decoder | None = None) -> list[tuple[str, str]]:
    """``block``'s fields as ``hpack`` decodes them without ``raw``: as text."""
    # hpack's docstring says so; its annotation names the bytes tuples of raw=True.
    return cast(list[tuple[str, str]], (decoder or hpack.Decoder()).decode(block))


@pytest.mark.parametrize(
    ("length", "kind", "flags", "stream"),
    [(0, h2.SETTINGS, h2.ACK, 0), (16_384, h2.DATA, h2.END_STREAM, 1), (4 << 20, 0, 0, 2**31 - 1)],
)
def test_frame_head_round_trips(length: int, kind: int, flags: int, stream: int) -> None:
    raw = h2.head(length, kind, flags, stream)
    assert len(raw) == 9
    assert h2.parse_head(b"xx" + raw, 2) == (length, kind, flags, stream)


def test_control_frames() -> None:
    assert h2.window_update(3, 1000) == b"\x00\x00\x04\x08\x00\x00\x00\x00\x03\x00\x00\x03\xe8"
    assert h2.parse_u32(h2.rst_stream(1, h2.CANCEL)[9:]) == h2.CANCEL
    assert h2.ping_ack(b"12345678") == b"\x00\x00\x08\x06\x01\x00\x00\x00\x0012345678"
    assert h2.goaway(5, h2.PROTOCOL_ERROR)[9:] == b"\x00\x00\x00\x05\x00\x00\x00\x01"
    frame = h2.settings([(h2.INITIAL_WINDOW_SIZE, 1 << 22), (h2.ENABLE_PUSH, 0)])
    assert h2.parse_settings(frame[9:]) == [(h2.INITIAL_WINDOW_SIZE, 1 << 22), (h2.ENABLE_PUSH, 0)]
    with pytest.raises(h2.ProtocolError):
        h2.parse_settings(b"abc")
    with pytest.raises(h2.ProtocolError):
        h2.parse_u32(b"abc")


@pytest.mark.parametrize(
    ("flags", "payload", "priority", "want"),
    [
        (0, b"data", False, b"data"),
        (h2.PADDED, b"\x02dataXX", False, b"data"),
        (h2.PADDED | h2.PRIORITY_FLAG, b"\x01PPPPPblockX", True, b"block"),
        (h2.PRIORITY_FLAG, b"PPPPPblock", True, b"block"),
    ],
)
def test_unpad(flags: int, payload: bytes, priority: bool, want: bytes) -> None:
    assert h2.unpad(flags, payload, priority=priority) == want


def test_unpad_refuses_padding_longer_than_the_frame() -> None:
    with pytest.raises(h2.ProtocolError):
        h2.unpad(h2.PADDED, b"\x09ab")


def test_blocks_decode_to_their_fields_and_leave_the_table_alone() -> None:
    fields = [(":status", "200"), ("content-type", "application/grpc"), ("x-long", "v" * 300)]
    decoder = hpack.Decoder()
    block = h2.block(fields)
    assert text_fields(block, decoder) == fields
    assert len(decoder.header_table.dynamic_entries) == 0
    assert block[0] == 0x88  # :status 200 by its static index
    assert h2.state_neutral(block)


def test_state_neutral_tells_blocks_that_change_the_table() -> None:
    encoder = hpack.Encoder()
    fields: list[tuple[str, str] | tuple[str, str, bool]] = [
        (":method", "POST"),
        (":path", "/x"),
        ("authorization", "Bearer t", True),  # never indexed
    ]
    first = encoder.encode(fields)  # adds :path to the dynamic table
    again = encoder.encode(fields)  # indexed, and the never-indexed token
    assert not h2.state_neutral(first)
    assert h2.state_neutral(again)
    assert not h2.state_neutral(b"\x3f\xe1\x1f")  # a table size update
    assert not h2.state_neutral(b"\x00\x05ab")  # a literal cut short


def test_decoder_caches_state_neutral_blocks_until_the_table_changes() -> None:
    seen: list[Fields] = []

    def digest(fields: Fields) -> int:  # how many blocks were decoded so far
        seen.append(fields)
        return len(seen)

    decoder = BlockDecoder(digest)
    encoder = hpack.Encoder()
    one = [(":path", "/a"), ("k", "1")]
    first, again = encoder.encode(one), encoder.encode(one)
    assert decoder.decode(first) == 1
    assert decoder.decode(again) == 2
    assert decoder.decode(again) == 2  # remembered
    other = encoder.encode([("k", "2")])  # inserts: indices shift
    assert decoder.decode(other) == 3
    assert decoder.decode(again) == 4  # decoded anew after the change:
    assert seen[-1] != seen[1]  # the same bytes now mean other fields


def test_a_bad_block_is_a_protocol_error() -> None:
    with pytest.raises(h2.ProtocolError):
        BlockDecoder(lambda fields: fields).decode(b"\xff\xff\xff\xff\x0f")


def test_large_blocks_continue_in_continuation_frames() -> None:
    data = bytes(40_000)
    raw = h2.headers_frames(3, data, end_stream=True)
    first = h2.parse_head(raw, 0)
    assert first == (16_384, h2.HEADERS, h2.END_STREAM, 3)
    second = h2.parse_head(raw, 9 + 16_384)
    assert second == (16_384, h2.CONTINUATION, 0, 3)
    last = h2.parse_head(raw, 2 * (9 + 16_384))
    assert last == (40_000 - 2 * 16_384, h2.CONTINUATION, h2.END_HEADERS, 3)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("100m", 0.1), ("5S", 5.0), ("2M", 120.0), ("1H", 3600.0), ("7u", 7e-6), ("9n", 9e-9)],
)
def test_grpc_timeout(value: str, seconds: float) -> None:
    assert h2.parse_grpc_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "m", "10", "10x", "-5m", "123456789m"])
def test_grpc_timeout_malformed(value: str) -> None:
    assert h2.parse_grpc_timeout(value) is None


def test_status_blocks() -> None:
    only = dict(text_fields(h2.grpc_status_block("NOT_FOUND", "no 'x' 100%", headers_sent=False)))
    assert only == {
        ":status": "200",
        "content-type": "application/grpc",
        "grpc-status": "5",
        "grpc-message": "no 'x' 100%25",
    }
    trailers = dict(text_fields(h2.grpc_status_block("OK", "", headers_sent=True)))
    assert trailers == {"grpc-status": "0"}
