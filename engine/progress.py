"""Progress reporting: the callback type long steps (downloads, exports,
uploads, hashing) report through, and a bar that draws it on a terminal.

A step calls ``progress(done, total, message)``; ``done`` and ``total`` are in
the step's own unit (bytes mostly) and ``message`` says what it is doing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

Progress = Callable[[float, float, str], None]
"""``progress(done, total, message)``: ``done`` of ``total`` units so far."""


class ProgressBar:
    """``progress(done, total, message)`` drawn as one line on a terminal,
    or a line every 10 % otherwise."""

    def __init__(self, label: str, stream: TextIO | None = None, quiet: bool = False):
        self.label = label
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0
        self._last_decile = -1
        self._t0 = time.monotonic()

    def __call__(self, done: float, total: float, message: str = "") -> None:
        if self.quiet or total <= 0:
            return
        frac = min(max(done / total, 0.0), 1.0)
        now = time.monotonic()
        if self._tty:
            if now - self._last < 0.1 and frac < 1.0:
                return
            self._last = now
            width = 30
            filled = int(frac * width)
            bar = "#" * filled + "-" * (width - filled)
            rate = done / 1e6 / max(now - self._t0, 1e-6)
            text = (
                f"\r{self.label} [{bar}] {frac * 100:5.1f}% {rate:7.1f} MB/s "
                f"{message[:30]:30}"
            )
            self.stream.write(text)
            if frac >= 1.0:
                self.stream.write("\n")
            self.stream.flush()
        else:
            decile = int(frac * 10)
            if decile != self._last_decile:
                self._last_decile = decile
                print(f"{self.label}: {frac * 100:.0f}%", file=self.stream, flush=True)
