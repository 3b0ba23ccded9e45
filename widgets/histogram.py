"""A histogram of a few hundred values (episode returns, lengths) with the
mean marked, drawn with pyqtgraph."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QVBoxLayout, QWidget

from widgets.theme import follow_palette, style_plot

if TYPE_CHECKING:
    import pyqtgraph as pg

BAR_COLOR = "#4272c4"
MEAN_COLOR = "#d62728"


def histogram_bins(
    values: Sequence[float], max_bins: int = 20
) -> tuple[np.ndarray, np.ndarray]:
    """(edges, counts) with at most ``max_bins`` bins; identical values get
    one bin of width 1 centred on them (numpy would make it invisible)."""
    data = np.asarray(values, dtype=float)
    data = data[np.isfinite(data)]
    if not len(data):
        return np.zeros(0), np.zeros(0, dtype=int)
    lo, hi = float(data.min()), float(data.max())
    if hi - lo < 1e-12:
        return np.array([lo - 0.5, lo + 0.5]), np.array([len(data)])
    # About one bin per two values, never more than max_bins (few values in
    # many bins read as noise).
    n_bins = int(np.clip(np.ceil(len(data) / 2), 1, max_bins))
    counts, edges = np.histogram(data, bins=n_bins, range=(lo, hi))
    return edges, counts


class Histogram(QWidget):
    """``set_values(values)`` draws the bars and a line at the mean. The
    pyqtgraph plot is built the first time it is shown or has values (a
    hidden histogram cost a fifth of the launch)."""

    def __init__(
        self, parent: QWidget | None = None, title: str = "", x_label: str = ""
    ) -> None:
        super().__init__(parent)
        self._title, self._x_label = title, x_label
        self._plot: pg.PlotWidget | None = None
        self._edges = np.zeros(0)
        self._counts = np.zeros(0, dtype=int)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)

    @property
    def plot(self) -> pg.PlotWidget:
        return self._plot if self._plot is not None else self._build_plot()

    def _build_plot(self) -> pg.PlotWidget:
        import pyqtgraph as pg  # here: a hidden histogram needs none at launch

        plot = self._plot = pg.PlotWidget(background="w")
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        plot.showGrid(y=True, alpha=0.25)
        follow_palette(self, lambda dark: style_plot(plot, dark, self._title))
        if self._x_label:
            plot.setLabel("bottom", self._x_label)
        plot.setLabel("left", "episodes")
        self.bars = pg.BarGraphItem(x0=[], x1=[], height=[], brush=BAR_COLOR, pen="w")
        self.mean_line = pg.InfiniteLine(
            angle=90,
            pen=pg.mkPen(MEAN_COLOR, width=2, style=Qt.PenStyle.DashLine),
            label="mean",
            labelOpts={"position": 0.92, "color": MEAN_COLOR, "fill": "#ffffffcc"},
        )
        plot.addItem(self.bars)
        plot.addItem(self.mean_line)
        self.mean_line.hide()
        layout = self.layout()
        assert layout is not None
        layout.addWidget(plot)
        return plot

    def showEvent(self, event: QShowEvent) -> None:
        if self._plot is None:
            self._build_plot()
        super().showEvent(event)

    def set_values(self, values: Sequence[float], max_bins: int = 20) -> None:
        self._edges, self._counts = histogram_bins(values, max_bins)
        if self._plot is None:
            if not len(self._counts):
                return  # nothing drawn yet, nothing to clear
            self._build_plot()
        if not len(self._counts):
            self.bars.setOpts(x0=[], x1=[], height=[])
            self.mean_line.hide()
            return
        self.bars.setOpts(x0=self._edges[:-1], x1=self._edges[1:], height=self._counts)
        finite = np.asarray(values, dtype=float)
        mean = float(finite[np.isfinite(finite)].mean())
        self.mean_line.setValue(mean)
        # Set the text itself: the label re-formats only while visible.
        text = f"mean {mean:.3g}"
        self.mean_line.label.setFormat(text)
        self.mean_line.label.setText(text)
        self.mean_line.show()
        span = self._edges[-1] - self._edges[0]
        self.plot.setXRange(
            self._edges[0] - 0.05 * span, self._edges[-1] + 0.05 * span, padding=0
        )
        self.plot.setYRange(0, max(1, int(self._counts.max())) * 1.1, padding=0)

    def counts(self) -> list[int]:
        return [int(c) for c in self._counts]

    def edges(self) -> list[float]:
        return [float(e) for e in self._edges]
