"""Which parts each ranged stream reads (processors.storage.runs): where a new stream
starts, as a table, and the claims streams make as they go."""

from __future__ import annotations

import pytest

from processors.storage.runs import Claims, Run, start

MiB = 1 << 20


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ([], None),  # every part taken
        ([Run(0, 0, 8, MiB, headed=False)], (0, 0)),  # the first stream: a file's start
        # The first stream reads part 0 and goes on: the second takes the back half.
        ([Run(0, 1, 7, MiB, headed=True)], (0, 4)),
        ([Run(0, 1, 3, MiB, True), Run(0, 5, 3, MiB, True)], (0, 2)),  # the first of equals
        ([Run(0, 7, 1, MiB, headed=True)], (0, 7)),  # one part left: taken from its stream
        # A run no stream heads into (another file, or a gap a resumed pull left) first,
        # the largest of them, though a headed one is larger.
        (
            [Run(0, 1, 7, MiB, True), Run(1, 0, 2, MiB, False), Run(2, 0, 3, MiB, False)],
            (2, 0),
        ),
        ([Run(0, 0, 2, 8 * MiB, False), Run(1, 0, 8, MiB, False)], (0, 0)),  # by bytes
    ],
)
def test_where_a_new_stream_starts(runs: list[Run], expected: tuple[int, int] | None) -> None:
    assert start(runs) == expected


def test_one_stream_alone_reads_every_part_in_order() -> None:
    claims = Claims([[0, 1, 2], [0, 1]], [MiB, MiB])
    read = []
    while (where := claims.begin()) is not None:
        file, part = where
        assert claims.reach(file, part) == {0: 2, 1: 1}[file]  # one GET to the file's end
        read.append(where)
        while claims.advance(file, part + 1):
            part += 1
            read.append((file, part))
        claims.end(file, part)
    assert read == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def test_a_later_stream_splits_the_run_and_the_first_stops_at_it() -> None:
    claims = Claims([range(8)], [MiB])
    assert claims.begin() == (0, 0)
    assert claims.reach(0, 0) == 7
    assert claims.begin() == (0, 4)  # parts 1-3 stay the first stream's
    assert claims.reach(0, 4) == 7
    assert [claims.advance(0, p) for p in (1, 2, 3, 4)] == [True, True, True, False]
    claims.end(0, 3)
    assert claims.begin() == (0, 6)  # the first is done: the rest of the second's run
    assert claims.advance(0, 5) and not claims.advance(0, 6)


def test_a_resumed_file_starts_streams_at_its_gaps() -> None:
    claims = Claims([[0, 1, 5, 6, 7]], [MiB])  # parts 2-4 kept from an interrupted pull
    assert claims.begin() == (0, 5)  # the larger gap
    assert claims.reach(0, 5) == 7
    assert claims.begin() == (0, 0)  # the other gap, which no stream heads into
    assert claims.reach(0, 0) == 1


def test_the_outlook_counts_the_gets_a_lone_stream_would_send() -> None:
    claims = Claims([range(4), [0], [0, 1]], [MiB, 2 * MiB, MiB])
    assert claims.outlook() == (8 * MiB, 3)  # three files to start
    assert claims.begin() == (0, 0)  # reads on into parts 1-3: no GET for them
    assert claims.outlook() == (7 * MiB, 2)
