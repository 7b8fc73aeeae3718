"""EAS's queue protocol read as operations (a table), and queue items encoded as EAS's
``queueservice.proto`` messages, decoded by the SDK's own generated module."""

from __future__ import annotations

import pytest
from eas_prediction.queue_client import DataFrameCodec, DataFrameListCodec

from gateway.queue import frames, protocol
from gateway.queue.protocol import (
    INPUT,
    SINK,
    Address,
    Attributes,
    BadQuery,
    Commit,
    Delete,
    Get,
    Put,
    Search,
    Truncate,
    Watch,
)


@pytest.mark.parametrize(
    ("method", "query", "expected"),
    [
        ("POST", "", Put({})),
        ("POST", "user=u1&_priority_=1", Put({"user": "u1"}, priority=True)),
        ("GET", "_attrs_=true", Attributes()),
        ("GET", "_search_=true&_index_=7", Search(7)),
        (
            "GET",
            "_index_=3&_length_=10&_timeout_=5s&_raw_=false&_auto_delete_=false&requestId=r1&k=v",
            Get(3, 10, 5.0, False, "r1", {"k": "v"}),
        ),
        ("GET", "_timeout_=500ms", Get(timeout_s=0.5)),
        ("GET", "_timeout_=10m", Get(timeout_s=protocol.MAX_TIMEOUT_S)),
        (
            "GET",
            "_watch_=true&_index_=0&_window_=5&_index_only_=true&_auto_commit_=false",
            Watch(0, 5, index_only=True),
        ),
        ("DELETE", "_index_=9&_trunc_=true", Truncate(9)),
        ("DELETE", "_indexes_=1%2C2", Delete((1, 2))),
        ("PUT", "_indexes_=4", Commit((4,))),
    ],
)
def test_operations(method: str, query: str, expected: protocol.Operation) -> None:
    assert protocol.operation(method, query) == expected


@pytest.mark.parametrize(
    ("method", "query", "words"),
    [
        ("GET", "_length_=lots", "_length_='lots' is not a whole number"),
        ("GET", "_length_=0", "_length_=0 is out of range"),
        ("GET", "_timeout_=soon", "use e.g. 5s"),
        ("GET", "_watch_=true&_window_=0", "_window_=0 is out of range"),
        ("DELETE", "_indexes_=a,b", "comma-separated"),
        ("DELETE", "", "_indexes_ needs at least one index"),
        ("PUT", "_indexes_=0", "each 1 or more"),
        ("GET", "_auto_delete_=maybe", "use true or false"),
        ("PATCH", "", "use POST, GET, PUT or DELETE"),
    ],
)
def test_bad_queries_say_what_to_send(method: str, query: str, words: str) -> None:
    with pytest.raises(BadQuery, match=words.replace("(", r"\(")):
        protocol.operation(method, query)


@pytest.mark.parametrize(
    ("segments", "path_qs", "expected"),
    [
        ((), "/", Address(INPUT, None)),
        (("sink",), "/sink", Address(SINK, None)),
        (
            ("v2", "models", "m", "infer"),
            "/v2/models/m/infer?x=1",
            Address(INPUT, "/v2/models/m/infer"),
        ),
        (("sink", "x"), "/sink/x", None),
    ],
)
def test_which_queue(segments: tuple[str, ...], path_qs: str, expected: Address | None) -> None:
    assert protocol.address(segments, path_qs) == expected


def test_frames_decode_with_the_sdk_codec() -> None:
    items = [
        frames.Item(1, b"\x00binary\xff", {"status": "200", "requestId": "r-1"}),
        frames.Item(2**40, b"", {}),
        frames.Item(3, b"x" * 300, {"k": "é"}, message="m"),
    ]
    decoded = DataFrameListCodec.decode(frames.encode_list(items)).get_list()
    got = [(d.index, d.data, {e.key: e.value for e in d.tags}, d.message) for d in decoded]
    assert got == [(i.index, i.data, dict(i.tags), i.message) for i in items]
    one = DataFrameCodec.decode(frames.encode_frame(items[0]))
    assert (one.index, one.data) == (1, b"\x00binary\xff")
