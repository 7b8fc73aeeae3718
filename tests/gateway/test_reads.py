"""The gateway's read buffers (``gateway/reads.py``): a read goes to a buffer no view of an
earlier read still holds; a buffer is reused, warm, once its views are gone."""

from __future__ import annotations

from gateway.reads import READ_BYTES, ReadBuffers


def read(buffers: ReadBuffers, data: bytes) -> memoryview:
    """What a transport does: take room, read into it."""
    room = buffers.take()
    assert len(room) == READ_BYTES
    room[: len(data)] = data
    return room


def test_a_buffer_no_view_holds_takes_every_read() -> None:
    buffers = ReadBuffers()
    first = buffers.current
    for i in range(3):
        del_room = read(buffers, b"call %d" % i)
        assert buffers.copy(6) == b"call %d" % i
        del del_room  # the transport lets go of its room after the read
        assert bytes(buffers.lend(0, 6)) == b"call %d" % i  # a view, gone at once
    assert buffers.current is first and buffers.made == 1 and buffers.held == 0


def test_a_view_still_held_sends_the_next_read_elsewhere_and_keeps_its_bytes() -> None:
    buffers = ReadBuffers()
    room = read(buffers, b"head|first body")
    del room
    body = buffers.lend(5, 15)  # e.g. queued behind another request, or half written
    room = read(buffers, b"head|second one")
    del room
    assert bytes(body) == b"first body"  # not overwritten by the second read
    assert bytes(buffers.lend(5, 15)) == b"second one"
    assert buffers.held == 1 and buffers.made == 2


def test_a_spare_is_reused_once_its_views_are_gone() -> None:
    buffers = ReadBuffers()
    first = buffers.current
    del_room = read(buffers, b"one")
    del del_room
    held = buffers.lend(0, 3)
    read(buffers, b"two")  # to a new buffer; the first kept as a spare
    second = buffers.current
    assert second is not first and buffers.spares == [first]
    view_of_second = buffers.lend(0, 3)
    del held  # the first buffer's only view is gone
    read(buffers, b"six")  # the second is held: the free spare takes it, nothing new made
    assert buffers.current is first and buffers.made == 2
    assert bytes(view_of_second) == b"two"
