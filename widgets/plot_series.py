"""The series behind a live plot's curve, and the item that draws it.

A curve keeps its data append-only between redraws, an incremental EMA
(smoothing) and a min/max pyramid, so a redraw costs O(pixels), not
O(points): it clips to the visible x range and reduces a dense curve to the
max and min of each pixel column (kept between redraws, so a tick redoes
only the last column and the new points). It is drawn by a lean polyline
item (:class:`Line`) rather than a PlotDataItem, whose per-change and
per-paint bookkeeping was most of a frame. Used by ``widgets.live_plot``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

Source = Callable[[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]
"""``source(run_id, key) -> (steps, times, values)``."""

#: Above this many drawn raw points a curve uses a 1 px pen: Qt draws wide
#: pens about 10x slower (measured: 3 curves x 2,800 points, 4 ms vs 45 ms a
#: paint). A decimated curve always does.
WIDE_PEN_MAX_POINTS = 1500


def ema_smooth(
    values: np.ndarray, weight: float, *, prev: float = 0.0, start: int = 0
) -> tuple[np.ndarray, float]:
    """TensorBoard's debiased exponential moving average, vectorized.

    ``e[i] = w * e[i-1] + (1 - w) * x[i]`` with ``e[-1] = prev`` and output
    ``e[i] / (1 - w ** (start + i + 1))``. Returns ``(smoothed, e[-1])`` so a
    later call can continue with ``prev=e[-1], start=start + len(values)``.
    The recurrence is solved by log-step doubling (a Hillis-Steele scan): about
    ``log2(40 / -ln w)`` vectorized passes, exact to ~1e-15 relative.
    """
    w = float(weight)
    b = np.asarray(values, dtype=np.float64) * (1.0 - w)
    n = len(b)
    if n == 0 or w <= 0.0:
        return b, (float(b[-1]) if n else prev)
    b[0] += w * prev
    tmp = np.empty(n)  # one scratch buffer: a fresh temporary per pass costs more
    k, a, tail = 1, w, 1.0 / (1.0 - w)
    while k < n and a * tail > 1e-16:
        shifted = np.multiply(b[:-k], a, out=tmp[: n - k])
        b[k:] += shifted
        a *= a
        k *= 2
    last = float(b[-1])
    horizon = math.ceil(math.log(1e-17) / math.log(w))
    if start < horizon:
        j = min(n, horizon - start)
        b[:j] /= 1.0 - w ** np.arange(start + 1, start + j + 1, dtype=np.float64)
    return b, last


class Growable:
    """A float64 array with amortized O(1) appends (rows share one block)."""

    __slots__ = ("data", "n")

    def __init__(self, rows: int = 1) -> None:
        self.data = np.empty((rows, 64), dtype=np.float64)
        self.n = 0

    def extend(self, *cols: np.ndarray) -> None:
        m = len(cols[0])
        need = self.n + m
        if need > self.data.shape[1]:
            grown = np.empty((self.data.shape[0], max(need, 2 * self.data.shape[1])))
            grown[:, : self.n] = self.data[:, : self.n]
            self.data = grown
        for r, col in enumerate(cols):
            self.data[r, self.n : need] = col
        self.n = need


class PeakPyramid:
    """Min/max of an append-only series over buckets of 2**(BASE+L) points."""

    BASE = 4  # finest bucket: 16 points

    def __init__(self) -> None:
        self.levels: list[Growable] = []  # rows: 0 = min, 1 = max
        self.n = 0
        # The last columns drawn: (key, end, first point of the last
        # column, column numbers, maxima, minima); see columns().
        self._columns: (
            tuple[
                tuple[int, int, float, float, int, int],
                int,
                int,
                np.ndarray,
                np.ndarray,
                np.ndarray,
            ]
            | None
        ) = None

    def update(self, y: np.ndarray) -> None:
        """Take in points appended since the last update (``len(y) >= self.n``)."""
        self.n = n = len(y)
        level = 0
        while (n >> (self.BASE + level)) >= 1:
            if level == len(self.levels):
                self.levels.append(Growable(2))
            grow = self.levels[level]
            count = n >> (self.BASE + level)
            old = grow.n
            if count > old:
                if level == 0:
                    size = 1 << self.BASE
                    chunk = y[old * size : count * size].reshape(-1, size)
                    grow.extend(chunk.min(axis=1), chunk.max(axis=1))
                else:
                    below = self.levels[level - 1].data
                    lo = below[0, 2 * old : 2 * count].reshape(-1, 2).min(axis=1)
                    hi = below[1, 2 * old : 2 * count].reshape(-1, 2).max(axis=1)
                    grow.extend(lo, hi)
            elif count == old:
                break  # no new bucket here: none on the coarser levels either
            level += 1

    def columns(
        self,
        x: np.ndarray,
        y: np.ndarray,
        i0: int,
        i1: int,
        span: tuple[float, float],
        count: int,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Points ``[i0, i1)`` as the max and min of each of ``count`` pixel
        columns over the x range ``span`` (x ascending), between the exact
        first and last points; None when there are at most two points per
        column.

        Columns are taken from the coarsest pyramid level whose buckets hold
        at most a quarter of a column's points (a bucket goes to the column
        its first point falls in: a column edge is off by less than a quarter
        of a pixel), plus the raw points around the whole buckets. Columns
        are kept: while ``x``, ``i0``, ``span`` and ``count`` stay, a call
        after an append redoes only the last column and the new points."""
        m = i1 - i0
        lo, hi = span
        if m <= 2 * count or count < 1 or not hi > lo:
            return None
        level = math.floor(math.log2(m / count / 4)) - self.BASE
        level = min(level, len(self.levels) - 1)
        key = (x.__array_interface__["data"][0], i0, lo, hi, count, level)
        kept = self._columns
        if kept is not None and kept[0] == key and kept[1] <= i1:
            # Redo from the first point of the last kept column (it may grow).
            _, _, start, cols, tops, bottoms = kept
            new = self._segments(x, y, start, i1, level, lo, hi, count)
            cols = np.concatenate([cols[:-1], new[0]])
            tops = np.concatenate([tops[:-1], new[1]])
            bottoms = np.concatenate([bottoms[:-1], new[2]])
            start = new[3]
        else:
            cols, tops, bottoms, start = self._segments(
                x, y, i0, i1, level, lo, hi, count
            )
        self._columns = (key, i1, start, cols, tops, bottoms)
        step = (hi - lo) / count
        xc = np.clip(lo + step * (cols + 0.5), x[i0], x[i1 - 1])
        xs = np.empty(2 * len(cols) + 2)
        ys = np.empty(2 * len(cols) + 2)
        xs[1:-1] = np.repeat(xc, 2)
        ys[1:-1:2] = tops
        ys[2:-1:2] = bottoms
        xs[0], ys[0] = x[i0], y[i0]
        xs[-1], ys[-1] = x[i1 - 1], y[i1 - 1]
        return xs, ys

    def _segments(
        self,
        x: np.ndarray,
        y: np.ndarray,
        i0: int,
        i1: int,
        level: int,
        lo: float,
        hi: float,
        count: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(column, max, min) of each column that points ``[i0, i1)`` fall
        in, and the index of the first point of the last column."""
        size = 1 << (self.BASE + level) if level >= 0 else 1
        b0 = -(-i0 // size)
        b1 = max(b0, min(i1 // size, self.levels[level].n)) if level >= 0 else b0
        head, tail = (b0 * size, b1 * size) if b1 > b0 else (i1, i1)
        # Source elements: raw points before the whole buckets, the buckets
        # (placed by their first point), raw points after them.
        src_x = np.concatenate([x[i0:head], x[head:tail:size], x[tail:i1]])
        if b1 > b0:
            grow = self.levels[level].data
            src_hi = np.concatenate([y[i0:head], grow[1, b0:b1], y[tail:i1]])
            src_lo = np.concatenate([y[i0:head], grow[0, b0:b1], y[tail:i1]])
        else:
            src_hi = src_lo = y[i0:i1]
        step = (hi - lo) / count
        # Left of the span: the first column; right of it: the last.
        col = np.clip((src_x - lo) / step, 0, count - 1).astype(np.int64)
        k = np.flatnonzero(np.diff(col)) + 1
        k = np.concatenate([[0], k])
        last = int(k[-1])
        nh, nb = head - i0, b1 - b0
        if last < nh:
            first = i0 + last
        elif last < nh + nb:
            first = (b0 + last - nh) * size
        else:
            first = tail + last - nh - nb
        return (
            col[k],
            np.maximum.reduceat(src_hi, k),
            np.minimum.reduceat(src_lo, k),
            first,
        )


class Display:
    """What a curve draws: raw or EMA-smoothed values plus their peak pyramid.

    Built incrementally, a bounded number of points per call, so smoothing a
    million points never blocks one redraw tick.
    """

    __slots__ = ("last", "n", "pyramid", "smooth", "weight")

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self.smooth = Growable(1) if weight > 0 else None
        self.last = 0.0
        self.pyramid = PeakPyramid()
        self.n = 0

    def y(self, values: np.ndarray) -> np.ndarray:
        if self.smooth is None:
            return values[: self.n]
        return self.smooth.data[0, : self.n]

    def advance(self, values: np.ndarray, limit: int | None) -> bool:
        """Take in up to ``limit`` new points; True when all of ``values`` are in."""
        n = len(values)
        m = n if limit is None else min(n, self.n + limit)
        if m > self.n:
            if self.smooth is not None:
                out, self.last = ema_smooth(
                    values[self.n : m], self.weight, prev=self.last, start=self.n
                )
                self.smooth.extend(out)
            self.n = m
            self.pyramid.update(self.y(values))
        return m == n


class Line(pg.GraphicsObject):  # type: ignore[misc]  # pyqtgraph: untyped
    """One curve of a plot: a polyline through points in view coordinates,
    with round symbols when asked (an evaluation's points).

    pyqtgraph's PlotDataItem did the same with some sixty Python calls per
    data change and per paint (display-dataset copies, bounds from nanmin
    and nanmax, pixel padding from the device transform, a new
    QPainterPath): with 12 curves, most of a frame. The panel decimates,
    clips and knows its data to be finite, so a line keeps a QPolygonF and
    claims the plot's view rectangle (all that a changed curve repaints
    anyway): nothing to measure per change. Its attributes are the ones the
    panel and its tests read of a PlotDataItem: ``getData()``,
    ``opts["pen"]``, ``implements("plotData")`` (listed by
    ``PlotItem.listDataItems``)."""

    def __init__(self) -> None:
        super().__init__()
        self.opts: dict[str, object] = {"pen": QtGui.QPen(), "antialias": True}
        self._x = self._y = np.empty(0)
        self._polygon = QtGui.QPolygonF()
        self._rect: QtCore.QRectF | None = None
        # Round symbols: (diameter in pixels, brush), or None for a plain line.
        self._symbols: tuple[float, QtGui.QBrush] | None = None
        self.setAcceptedMouseButtons(QtCore.Qt.MouseButton.NoButton)

    def implements(self, interface: str | None = None) -> bool | list[str]:
        return ["plotData"] if interface is None else interface == "plotData"

    def name(self) -> None:
        return None

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x, self._y

    def dataBounds(
        self, ax: int, frac: float = 1.0, orthoRange: object = None
    ) -> tuple[float | None, float | None]:
        """Bounds of the points on one axis (for pyqtgraph's auto-range)."""
        d = self._x if ax == 0 else self._y
        d = d[np.isfinite(d)]
        if not len(d):
            return None, None
        return float(d.min()), float(d.max())

    def setPen(self, pen: QtGui.QPen) -> None:
        self.opts["pen"] = pen
        self.update()

    def setAntialias(self, on: bool) -> None:
        if on != self.opts["antialias"]:
            self.opts["antialias"] = on
            self.update()

    def setSymbols(self, size: float, brush: QtGui.QBrush) -> None:
        """Draw a round symbol of ``size`` pixels at each point.

        Painted by the line itself: a child ScatterPlotItem cost 0.4 ms of
        Python per paint and per data change, about a third of repainting
        the Training workspace's plots when it is shown again."""
        self._symbols = (size, brush)
        self.update()

    def setData(self, x: np.ndarray, y: np.ndarray) -> None:
        old_x, old_y = self._x, self._y
        self._x, self._y = x, y
        polygon = pg.functions.create_qpolygonf(len(x))
        if len(x):  # (an empty polygon has no memory to write to)
            points = pg.functions.ndarray_from_qpolygonf(polygon)
            points[:, 0] = x
            points[:, 1] = y
        self._polygon = polygon
        if self._symbols is not None:
            self.update()  # (a symbol is wider than the margin Qt adds)
            return
        changed = self._changed(old_x, old_y)
        if changed is not None:
            self.update(changed)

    def _changed(self, old_x: np.ndarray, old_y: np.ndarray) -> QtCore.QRectF | None:
        """The part of the view to repaint after the points changed from
        ``old_x, old_y``: right of the last point the two lines share (a
        tick's new points end a curve), None when nothing in view changed.

        The view repaints that strip only (Qt adds a 2 px margin, more than a
        pen's overhang): the background, grid and the other curves left of
        it are not drawn again."""
        x, y = self._x, self._y
        rect = self.boundingRect()
        m = min(len(old_x), len(x))
        differ = np.flatnonzero((old_x[:m] != x[:m]) | (old_y[:m] != y[:m]))
        j = int(differ[0]) if len(differ) else m
        if j == len(x) == len(old_x):
            return None
        if j == 0 or rect.isEmpty():
            return rect
        lo = min(float(old_x[j - 1 :].min()), float(x[j - 1 :].min()))
        if not math.isfinite(lo):
            return rect
        if lo >= rect.right():
            return None
        lo = max(lo, rect.left())
        return QtCore.QRectF(lo, rect.top(), rect.right() - lo, rect.height())

    def viewRangeChanged(self) -> None:
        super().viewRangeChanged()
        self.prepareGeometryChange()
        self._rect = None

    def viewTransformChanged(self) -> None:
        super().viewTransformChanged()  # (forgets pyqtgraph's viewRect)
        self.prepareGeometryChange()
        self._rect = None

    def boundingRect(self) -> QtCore.QRectF:
        if self._rect is None:
            rect = self.viewRect()
            self._rect = QtCore.QRectF() if rect is None else rect
        return self._rect

    def paint(
        self,
        painter: QtGui.QPainter,
        option: QtWidgets.QStyleOptionGraphicsItem,
        widget: QtWidgets.QWidget | None = None,
    ) -> None:
        if self._polygon.size() >= 2:
            painter.setRenderHint(
                QtGui.QPainter.RenderHint.Antialiasing, bool(self.opts["antialias"])
            )
            painter.setPen(self.opts["pen"])
            painter.drawPolyline(self._polygon)
        if self._symbols is not None and self._polygon.size():
            self._paint_symbols(painter, *self._symbols)

    def _paint_symbols(
        self, painter: QtGui.QPainter, size: float, brush: QtGui.QBrush
    ) -> None:
        """Round symbols ``size`` pixels wide, centred on the points in
        device pixels (the view's scale would stretch them)."""
        centres = painter.transform().map(self._polygon)
        painter.save()
        painter.resetTransform()
        painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, True)
        painter.setPen(QtCore.Qt.PenStyle.NoPen)
        painter.setBrush(brush)
        radius = size / 2.0
        for i in range(centres.size()):
            painter.drawEllipse(centres.at(i), radius, radius)
        painter.restore()


class CurveHost(Protocol):
    """What a curve needs of the plot it is drawn in
    (:class:`widgets.plot_group.PlotGroup`): the view whose range decides
    which points are drawn, and whether that view follows the data."""

    view: pg.ViewBox
    follow_x: bool


Host = TypeVar("Host", bound=CurveHost)


@dataclass(eq=False)
class Curve(Generic[Host]):
    run_id: str
    key: str
    group: Host
    item: Line
    steps: np.ndarray = field(default_factory=lambda: np.empty(0))
    times: np.ndarray = field(default_factory=lambda: np.empty(0))
    values: np.ndarray = field(default_factory=lambda: np.empty(0))
    explicit: bool = False  # data pushed with set_curve (not fetched)
    display: Display | None = None  # what is drawn
    building: Display | None = None  # replacing it (new smoothing), in chunks
    needs_fetch: bool = True
    needs_reset: bool = True
    last_request: tuple[object, ...] | None = None
    drawn: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))
    wide: bool = True  # 2 px pen while few points are drawn (1 px is much faster)
    style: tuple[object, ...] = ()  # (color, width, line style) its pen has

    def x(self, mode: str) -> np.ndarray:
        return self.steps if mode == "step" else self.times

    def display_y(self) -> np.ndarray:
        if self.display is None:
            return self.values[:0]
        return self.display.y(self.values)

    def nearest(self, x: float, mode: str) -> tuple[float, float] | None:
        """The drawn point nearest ``x`` on the ``mode`` axis, as ``(x, y)``."""
        xs = self.x(mode)
        ys = self.display_y()
        n = min(len(xs), len(ys))
        if n == 0:
            return None
        i = int(np.searchsorted(xs[:n], x))
        if i >= n or (i > 0 and abs(xs[i - 1] - x) <= abs(xs[i] - x)):
            i = max(0, min(i, n) - 1)
        return float(xs[i]), float(ys[i])

    def refresh(
        self, source: Source | None, smoothing: float, limit: int | None
    ) -> bool:
        """Fetch new data (from ``source`` unless pushed) and take up to
        ``limit`` new points into the display; False if unfinished."""
        if self.needs_fetch and not self.explicit and source is not None:
            steps, times, values = source(self.run_id, self.key)
            if len(values) < len(self.values):
                self.needs_reset = True
            self.steps, self.times, self.values = steps, times, values
        self.needs_fetch = False
        disp = self.display
        if disp is None or disp.weight != smoothing or self.needs_reset:
            new = self.building
            if new is None or new.weight != smoothing or self.needs_reset:
                new = self.building = Display(smoothing)
                self.needs_reset = False
            if not new.advance(self.values, limit):
                return False  # keep drawing the old display meanwhile
            self.display, self.building = new, None
            return True
        return disp.advance(self.values, limit)

    def draw(self, x_axis: str, restyle: Callable[[Curve[Host]], None]) -> None:
        """Give the item the points in view (decimated to the view's pixel
        columns when dense); ``restyle(curve)`` when its pen's width changes."""
        disp = self.display
        assert disp is not None
        y = disp.y(self.values)
        n = len(y)
        x = self.x(x_axis)[:n]
        view = self.group.view
        width = max(100, int(view.width()))
        span = view.viewRange()[0]
        if self.group.follow_x or n == 0:
            i0, i1 = 0, n
        else:
            i0 = max(0, int(np.searchsorted(x, span[0], "left")) - 1)
            i1 = min(n, int(np.searchsorted(x, span[1], "right")) + 1)
        request = (id(disp), n, i0, i1, width, *span, x_axis)
        if request == self.last_request:
            return
        self.last_request = request
        columns = disp.pyramid.columns(x, y, i0, i1, (span[0], span[1]), width)
        xd, yd = (x[i0:i1], y[i0:i1]) if columns is None else columns
        # A 2 px pen for a few raw points; Qt strokes wide pens about 10x
        # slower, and an envelope (max and min per pixel column) with one
        # was 130 ms a frame for 12 curves here. An envelope's segments are
        # vertical or one pixel wide, where antialiasing shows little and
        # cost a tenth of the frame.
        wide = columns is None and len(xd) <= WIDE_PEN_MAX_POINTS
        if wide != self.wide:
            self.wide = wide
            restyle(self)
        self.item.setAntialias(columns is None)
        self.item.setData(xd, yd)
        self.drawn = (xd, yd)
