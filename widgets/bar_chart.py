"""Grouped bars (one group per category, one bar per series) with pyqtgraph,
for before/after comparisons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from widgets.theme import follow_palette, style_plot

SERIES_COLORS = ("#4272c4", "#ed7d31", "#70ad47", "#9467bd")


class GroupedBarChart(QWidget):
    def __init__(self, parent: QWidget | None = None, title: str = "") -> None:
        super().__init__(parent)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.showGrid(y=True, alpha=0.25)
        self.plot.hideButtons()
        follow_palette(self, lambda dark: style_plot(self.plot, dark, title))
        self.legend = self.plot.addLegend(offset=(-10, 10))
        self.bars: dict[str, pg.BarGraphItem] = {}
        self._texts: list[pg.TextItem] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)

    def set_data(
        self,
        categories: Sequence[str],
        series: Mapping[str, Sequence[float | None]],
    ) -> None:
        """``series`` maps a label to one value per category (None: no bar)."""
        self.plot.clear()
        self.legend.clear()
        self.bars.clear()
        self._texts.clear()
        n = max(1, len(series))
        width = 0.8 / n
        for s, (label, values) in enumerate(series.items()):
            xs, heights = [], []
            for c, value in enumerate(values):
                if value is None:
                    continue
                xs.append(c - 0.4 + width * (s + 0.5))
                heights.append(float(value))
            color = SERIES_COLORS[s % len(SERIES_COLORS)]
            item = pg.BarGraphItem(
                x=xs, height=heights, width=width * 0.9, brush=color, pen=None
            )
            self.plot.addItem(item)
            self.legend.addItem(item, label)
            self.bars[label] = item
            for x, h in zip(xs, heights, strict=True):
                text = pg.TextItem(f"{h:.3g}", color="#333333", anchor=(0.5, 1.0))
                text.setPos(x, h)
                self.plot.addItem(text)
                self._texts.append(text)
        axis = self.plot.getAxis("bottom")
        axis.setTicks([[(i, c) for i, c in enumerate(categories)]])
        self.plot.setXRange(-0.6, len(categories) - 0.4, padding=0)
        self.plot.enableAutoRange(axis="y")

    def heights(self, label: str) -> list[float]:
        item = self.bars.get(label)
        if item is None:
            return []
        return [float(h) for h in item.opts["height"]]
