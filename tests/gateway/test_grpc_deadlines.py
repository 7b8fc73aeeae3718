"""The gRPC relay's timing: deadlines (one timer per 10 ms slot, none left once calls
end) and when it gives up the CPU."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from gateway.grpc.relay import Call, Deadlines
from gateway.http.yielding import cedes_cpu


class Stub:
    """What Deadlines touches of a call."""

    def __init__(self) -> None:
        self.deadline: int | None = None


def test_calls_expire_by_slot_and_ended_ones_leave_no_timer() -> None:
    late = Stub()

    async def scenario() -> tuple[list[Any], Deadlines]:
        expired: list[Any] = []
        deadlines = Deadlines(expired.append)
        ended, alone = Stub(), Stub()
        for call, timeout in ((late, 0.05), (ended, 0.05), (alone, 30.0)):
            deadlines.add(cast(Call, call), timeout)
        assert len(deadlines.slots) == 2  # the two 50 ms calls share one slot's timer
        deadlines.remove(cast(Call, ended))
        deadlines.remove(cast(Call, alone))  # its slot is empty: its timer is cancelled
        assert len(deadlines.slots) == 1
        await asyncio.sleep(0.1)
        deadlines.remove(cast(Call, late))  # expired already: nothing to do
        return expired, deadlines

    expired, deadlines = asyncio.run(scenario())
    assert expired == [late] and late.deadline is None
    assert deadlines.slots == {}


@pytest.mark.parametrize(
    ("calls", "yield_at", "cedes"),
    [
        (0, 2, False),  # idle
        (1, 2, False),  # a lone call: nothing to batch, never waits for another process
        (2, 2, True),
        (64, 2, True),
        (7, 8, False),
        (8, 8, True),
        (64, 0, False),  # 0: never
        (1, 1, True),
    ],
)
def test_the_relay_yields_the_cpu_only_with_enough_calls_in_flight(
    calls: int, yield_at: int, cedes: bool
) -> None:
    assert cedes_cpu(calls, yield_at) is cedes
