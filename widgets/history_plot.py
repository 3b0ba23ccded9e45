"""An optimization history: one point per trial value and the best value so
far as a step line, drawn with pyqtgraph."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from widgets.integer_axis import IntegerAxis
from widgets.theme import follow_palette, style_plot

POINT_COLOR = "#4272c4"
BEST_COLOR = "#d62728"


class HistoryPlot(QWidget):
    """``set_history(x, values, best)``: ``values`` may hold NaN for trials
    without a value (pruned, failed), which get no point."""

    def __init__(
        self,
        parent: QWidget | None = None,
        x_label: str = "trial",
        y_label: str = "value",
    ) -> None:
        super().__init__(parent)
        # Trials are counted: no tick at trial 1.5.
        self.plot = pg.PlotWidget(
            background="w", axisItems={"bottom": IntegerAxis("bottom")}
        )
        self.plot.setMenuEnabled(False)
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setLabel("bottom", x_label)
        self.plot.setLabel("left", y_label)
        # Values as they are: 70 "(x0.001)" beside "CPU seconds" misread.
        self.plot.getAxis("left").enableAutoSIPrefix(False)
        self.plot.addLegend(offset=(10, 10))
        follow_palette(self, lambda dark: style_plot(self.plot, dark))
        self.points = pg.ScatterPlotItem(
            size=8, brush=pg.mkBrush(POINT_COLOR), pen=None, name="trial"
        )
        self.best = pg.PlotDataItem(
            pen=pg.mkPen(BEST_COLOR, width=2), name="best so far"
        )
        self.plot.addItem(self.points)
        self.plot.addItem(self.best)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)

    def set_history(self, x: np.ndarray, values: np.ndarray, best: np.ndarray) -> None:
        shown = np.isfinite(values)
        self.points.setData(x=x[shown], y=values[shown])
        kept = np.isfinite(best)
        bx, by = x[kept], best[kept]
        # The best so far holds until a trial beats it: a staircase.
        self.best.setData(x=np.repeat(bx, 2)[1:], y=np.repeat(by, 2)[:-1])

    def set_y_label(self, text: str) -> None:
        """What the values are (a sweep's objective)."""
        self.plot.setLabel("left", text)

    def y_label(self) -> str:
        return str(self.plot.getAxis("left").labelText)

    def point_count(self) -> int:
        return len(self.points.data)

    def clear(self) -> None:
        self.points.setData(x=[], y=[])
        self.best.setData(x=[], y=[])
