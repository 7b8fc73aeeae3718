"""The gRPC relay's deadlines: one timer per 10 ms slot, none left once calls end."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gateway.grpc_relay import Call, Deadlines


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
