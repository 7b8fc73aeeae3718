"""The one line ``eascmd create/modify/start`` keeps up to date while a service comes up.

On a terminal it is rewritten in place (no scrolling screens of numbers); on a pipe or in
CI it becomes a plain line whenever its kind changes (a new phase) and otherwise at most
every ``every`` seconds, so logs stay readable.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import TextIO


class LiveLine:
    def __init__(
        self,
        out: TextIO,
        *,
        tty: bool,
        every: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out, self._tty, self._every, self._clock = out, tty, every, clock
        self._shown = ""
        self._kind = ""
        self._printed_at = float("-inf")

    def show(self, text: str, kind: str) -> None:
        """Show ``text``; ``kind`` (e.g. the phase) changing makes a pipe print at once."""
        if text == self._shown:
            return
        if self._tty:
            width = shutil.get_terminal_size((100, 24)).columns - 1
            self._out.write("\r\033[K" + text[:width])
            self._out.flush()
            self._shown = text
            return
        now = self._clock()
        if kind != self._kind or now - self._printed_at >= self._every:
            print(text, file=self._out, flush=True)
            self._shown, self._kind, self._printed_at = text, kind, now

    def clear(self) -> None:
        """Before a normal line: a terminal's live line gives way to it."""
        if self._tty and self._shown:
            self._out.write("\r\033[K")
            self._out.flush()
        self._shown = ""
