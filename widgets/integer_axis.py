"""An axis that can tick on whole numbers only, for values that are counts
(a sweep's trials, a curriculum's stage, an episode's length): pyqtgraph
otherwise ticks at 1.5 and 2.5 when the range is small."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyqtgraph as pg


def integer_ticks(
    levels: Sequence[tuple[float, Sequence[float]]], low: float, high: float
) -> list[tuple[float, list[float]]]:
    """pyqtgraph's tick ``levels`` with every tick off a whole number left
    out; where none is left, each whole number between ``low`` and ``high``."""
    kept = [
        (spacing, [v for v in values if float(v).is_integer()])
        for spacing, values in levels
        if spacing >= 1
    ]
    kept = [(spacing, values) for spacing, values in kept if values]
    if kept:
        return kept
    first, last = math.ceil(low), math.floor(high)
    return [(1.0, [float(v) for v in range(first, last + 1)])] if first <= last else []


class IntegerAxis(pg.AxisItem):  # type: ignore[misc]  # pyqtgraph: untyped
    """A pyqtgraph axis; with ``integer`` its ticks and labels are whole
    numbers only."""

    def __init__(self, orientation: str, integer: bool = True) -> None:
        super().__init__(orientation=orientation)
        self.integer = integer

    def tickValues(
        self, minVal: float, maxVal: float, size: float
    ) -> list[tuple[float, list[float]]]:
        levels = super().tickValues(minVal, maxVal, size)
        return integer_ticks(levels, minVal, maxVal) if self.integer else levels

    def tickStrings(
        self, values: Sequence[float], scale: float, spacing: float
    ) -> list[str]:
        if self.integer:
            return [str(round(v * scale)) for v in values]
        return super().tickStrings(values, scale, spacing)  # type: ignore[no-any-return]
