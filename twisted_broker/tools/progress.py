"""Progress: a one-line count and rate on stderr while a tool works, only on a terminal.

The line appears only when the stream is a TTY and the work has lasted ``delay_s`` already,
so short commands and pipes into files or other programs see nothing. It is redrawn in place
(carriage return, erase to end of line) at most every ``interval_s``; ``finish`` erases it.
``add`` reads the clock, so tools call it per batch or per fetch, not per message.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

_ERASE = "\r\x1b[K"  # back to column 0, erase to the end of the line


def format_rate(count: int, seconds: float) -> str:
    """``"12,345 messages, 4,115 msgs/s"``: the count and its average rate."""
    rate = count / seconds if seconds > 0 else 0.0
    return f"{count:,} messages, {rate:,.0f} msgs/s"


class Progress:
    """Counts messages and shows ``label: N messages, R msgs/s`` on a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None, *, enabled: bool | None = None,
                 delay_s: float = 1.0, interval_s: float = 0.25,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.count = 0
        self._stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self._stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self._clock = clock
        self._started = clock()
        self._next_draw = self._started + delay_s
        self._interval_s = interval_s
        self._drawn = False

    def add(self, count: int = 1) -> None:
        """Count ``count`` more messages; redraw the line when it is due."""
        self.count += count
        self.tick()

    def tick(self) -> None:
        """Redraw if due. Tools that wait (for input, for messages) call it when idle."""
        if not self.enabled:
            return
        now = self._clock()
        if now >= self._next_draw:
            self._next_draw = now + self._interval_s
            self._stream.write(f"{_ERASE}{self.label}: {format_rate(self.count, now - self._started)}")
            self._stream.flush()
            self._drawn = True

    def finish(self) -> None:
        """Erase the line, if one was drawn, so the terminal is left as it was."""
        if self._drawn:
            self._stream.write(_ERASE)
            self._stream.flush()
            self._drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.finish()
