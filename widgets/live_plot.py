"""Live metric plots: grouped pyqtgraph plots that stay fast with millions of points.

:class:`LivePlotPanel` shows metric series of one or more runs in a grid of
plots grouped by rules (Rewards, Episode length, Losses, ...). It knows nothing
of where the data lives: the host gives it a *source* callable
``source(run_id, key) -> (steps, times, values)`` (for example
``MetricStore.series``) or pushes arrays with :meth:`LivePlotPanel.set_curve`,
and calls :meth:`LivePlotPanel.mark_dirty` when a series grew.

Redraws happen on the panel's own timer (25 Hz) and only for dirty curves, with
one ``setData`` each. Series are assumed append-only between redraws; each
curve keeps an incremental EMA (smoothing) and a min/max pyramid so a redraw
costs O(pixels), not O(points): the panel clips to the visible x range and
reduces a dense curve to the max and min of each pixel column (kept between
redraws, so a tick redoes only the last column and the new points). A curve
is a lean polyline item (:class:`_Line`) rather than a PlotDataItem, whose
per-change and per-paint bookkeeping was most of a frame.
"""

from __future__ import annotations

import csv
import fnmatch
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
import shiboken6
from PySide6 import QtCore, QtGui, QtWidgets

__all__ = [
    "OTHER_GROUP",
    "RUN_COLORS",
    "LivePlotPanel",
    "PlotVocabulary",
    "ema_smooth",
    "group_for_key",
    "metric_name",
]

Source = Callable[[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]
GroupRules = Sequence[tuple[str, Sequence[str]]]

#: The x axis title for each x mode.
X_AXIS_TITLES: dict[str, str] = {"step": "steps", "time": "wall time (s)"}


@dataclass(frozen=True)
class PlotVocabulary:
    """What a panel knows of the metrics it plots, given by its host (the
    studio's is :data:`studio.training.metric_vocabulary.TRAINING_METRICS`):
    the panel itself knows no trainer's names."""

    groups: GroupRules = ()
    """Group title and the key patterns (``fnmatch`` globs) that belong to
    it, matched against a key's name (:func:`metric_name`: a flow run's
    ``<node>/`` prefix left out). An exact name listed anywhere wins over a
    glob; globs are tried in order. A key no group takes goes to
    :data:`OTHER_GROUP`."""
    axes: dict[str, str] = field(default_factory=dict)
    """The y axis title (with its unit) of each group; the x axis says
    steps or seconds (:data:`X_AXIS_TITLES`)."""
    ignored: Sequence[str] = ()
    """Key patterns not worth a curve (bookkeeping)."""


OTHER_GROUP = "Other"

#: Run colors, in order of use; readable on dark and light backgrounds.
RUN_COLORS: tuple[str, ...] = (
    "#4c9be8",
    "#f28e2b",
    "#59b36b",
    "#e15759",
    "#b07aa1",
    "#d4b22c",
    "#45b7b0",
    "#ff9da7",
    "#9c755f",
    "#8f9bb3",
)
_LINE_STYLES = (
    QtCore.Qt.PenStyle.SolidLine,
    QtCore.Qt.PenStyle.DashLine,
    QtCore.Qt.PenStyle.DotLine,
    QtCore.Qt.PenStyle.DashDotLine,
)
_THEMES = {
    "dark": {
        "bg": "#1b1d21",
        "fg": "#c9ccd1",
        "dim": "#8a8f98",
        "frame": "#2b2e34",
        "gridline": "#33373e",
        "grid": "#141619",
    },
    "light": {
        "bg": "#ffffff",
        "fg": "#2b2e34",
        "dim": "#6b7079",
        "frame": "#d8dbe0",
        "gridline": "#e3e6ea",
        "grid": "#eef0f3",
    },
}
X_AXES = ("step", "time")
#: Above this many drawn raw points a curve uses a 1 px pen: Qt draws wide
#: pens about 10x slower (measured: 3 curves x 2,800 points, 4 ms vs 45 ms a
#: paint). A decimated curve always does.
_WIDE_PEN_MAX_POINTS = 1500


# --------------------------------------------------------------------- numerics
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


class _Growable:
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


class _PeakPyramid:
    """Min/max of an append-only series over buckets of 2**(BASE+L) points."""

    BASE = 4  # finest bucket: 16 points

    def __init__(self) -> None:
        self.levels: list[_Growable] = []  # rows: 0 = min, 1 = max
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
                self.levels.append(_Growable(2))
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


class _Display:
    """What a curve draws: raw or EMA-smoothed values plus their peak pyramid.

    Built incrementally, a bounded number of points per call, so smoothing a
    million points never blocks one redraw tick.
    """

    __slots__ = ("last", "n", "pyramid", "smooth", "weight")

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self.smooth = _Growable(1) if weight > 0 else None
        self.last = 0.0
        self.pyramid = _PeakPyramid()
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


# ------------------------------------------------------------------ grouping
def metric_name(key: str) -> str:
    """A metric's name without the flow node that logged it: a key of three
    or more segments is ``<node>/<name>`` (``train/reward/mean``:
    ``reward/mean``); SB3's and TRL's own keys have two (``rollout/...``)."""
    parts = key.split("/")
    return "/".join(parts[1:]) if len(parts) >= 3 else key


def group_for_key(
    key: str, rules: GroupRules = (), ignored: Sequence[str] = ()
) -> str | None:
    """The group title a metric key belongs to (matched on the key and on its
    :func:`metric_name`); None when it is ignored."""
    names = dict.fromkeys((key, metric_name(key)))
    if any(fnmatch.fnmatchcase(n, pat) for n in names for pat in ignored):
        return None
    for title, patterns in rules:
        if any(n in patterns for n in names):
            return title
    for title, patterns in rules:
        if any(fnmatch.fnmatchcase(n, pat) for n in names for pat in patterns):
            return title
    return OTHER_GROUP


# ------------------------------------------------------------------- axes
def _format_steps(v: float) -> str:
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.4g}{suffix}"
    return f"{v:.4g}"


def _format_duration(v: float) -> str:
    sign = "-" if v < 0 else ""
    s = round(abs(v))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{sign}{h}:{m:02d}:{sec:02d}"
    return f"{sign}{m}:{sec:02d}"


def _format_x(mode: str, v: float) -> str:
    return f"{v:,.0f}" if mode == "step" else _format_duration(v)


def _followed_range(
    current: tuple[float, float] | list[float],
    lo: float,
    hi: float,
    fitted: bool,
    margins: tuple[float, float],
) -> tuple[float, float] | None:
    """The view range on one axis that keeps data from ``lo`` to ``hi`` in
    view, with ``margins`` (fractions of the data's span) below and above; or
    None to keep the ``current`` range, which already holds the data and is
    at most 1.5 times their span (once fitted: the range changes only now and
    then)."""
    span = hi - lo if hi > lo else max(abs(hi) * 0.1, 1.0)
    cur_lo, cur_hi = current
    fits = cur_lo <= lo and hi <= cur_hi
    if fits and (cur_hi - cur_lo) <= 1.5 * span and fitted:
        return None
    return lo - margins[0] * span, hi + margins[1] * span


_TEXT_SIZES: dict[tuple[str, int, str], QtCore.QRectF] = {}
"""Measured tick labels by (font, flags, text), shared by every axis."""
_TEXT_SIZES_MAX = 4096
_MEASURE_RECT = QtCore.QRectF(0, 0, 100, 100)
"""The rectangle pyqtgraph's axes measure tick labels in."""


class _MeasuringPainter:
    """The painter an axis lays out its ticks with, measuring each label once.

    pyqtgraph asks the painter for every tick label's bounding rectangle each
    time an axis regenerates its ticks (a range change, a resize): text shaping
    was a fifth of a plot's paint here, for labels ("0", "250k") that recur."""

    def __init__(self, painter: QtGui.QPainter) -> None:
        self._painter = painter

    def __getattr__(self, name: str) -> object:
        return getattr(self._painter, name)

    def boundingRect(
        self, rect: QtCore.QRectF, flags: QtCore.Qt.AlignmentFlag, text: str
    ) -> QtCore.QRectF:
        if rect != _MEASURE_RECT:
            return self._painter.boundingRect(rect, flags, text)
        key = (self._painter.font().key(), int(flags), text)
        size = _TEXT_SIZES.get(key)
        if size is None:
            if len(_TEXT_SIZES) >= _TEXT_SIZES_MAX:
                _TEXT_SIZES.clear()
            size = _TEXT_SIZES[key] = self._painter.boundingRect(rect, flags, text)
        return QtCore.QRectF(size)  # a copy: the axis shrinks its height


# pyqtgraph ships no type information: its classes are Any to mypy.
class _Axis(pg.AxisItem):  # type: ignore[misc]
    """An axis whose tick labels are measured once (see _MeasuringPainter)."""

    def generateDrawSpecs(self, p: QtGui.QPainter) -> Any:
        return super().generateDrawSpecs(_MeasuringPainter(p))


class _XAxis(_Axis):
    """Bottom axis that writes steps as 250k / 1.5M and wall time as h:mm:ss."""

    def __init__(self) -> None:
        super().__init__(orientation="bottom")
        self.mode = "step"
        self.enableAutoSIPrefix(False)

    def tickStrings(
        self, values: Sequence[float], scale: float, spacing: float
    ) -> list[str]:
        fmt = _format_steps if self.mode == "step" else _format_duration
        return [fmt(v * scale) for v in values]


class _PlotWidget(pg.PlotWidget):  # type: ignore[misc]  # pyqtgraph: untyped
    """A PlotWidget with a modest size hint, so plots share the viewport."""

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(420, 220)


class _Line(pg.GraphicsObject):  # type: ignore[misc]  # pyqtgraph: untyped
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
        self._symbols: pg.ScatterPlotItem | None = None
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
        """Draw a round symbol of ``size`` pixels at each point."""
        if self._symbols is None:
            self._symbols = pg.ScatterPlotItem(pxMode=True, symbol="o")
            self._symbols.setParentItem(self)
        self._symbols.setSize(size)
        self._symbols.setBrush(brush)
        self._symbols.setPen(None)
        self._symbols.setData(x=self._x, y=self._y)

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
            self._symbols.setData(x=x, y=y)
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
        if self._polygon.size() < 2:
            return
        painter.setRenderHint(
            QtGui.QPainter.RenderHint.Antialiasing, bool(self.opts["antialias"])
        )
        painter.setPen(self.opts["pen"])
        painter.drawPolyline(self._polygon)


# ------------------------------------------------------------------ model
@dataclass(eq=False)
class _Curve:
    run_id: str
    key: str
    group: _Group
    item: _Line
    steps: np.ndarray = field(default_factory=lambda: np.empty(0))
    times: np.ndarray = field(default_factory=lambda: np.empty(0))
    values: np.ndarray = field(default_factory=lambda: np.empty(0))
    explicit: bool = False  # data pushed with set_curve (not fetched)
    display: _Display | None = None  # what is drawn
    building: _Display | None = None  # replacing it (new smoothing), in chunks
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


class _Legend(QtWidgets.QLabel):
    """The word-wrapped rich-text legend under a plot, which keeps the
    tallest height it has needed at its width.

    A legend one line shorter (the hover readout gone, one run fewer) resized
    the plot above it, and a resized plot re-lays out its axes and repaints,
    plot by plot, in the same turn of the event loop; selecting one run, then
    three, then one again did that to every plot each time."""

    def __init__(self) -> None:
        super().__init__()
        self._kept_width = -1  # the width the kept height was measured at
        self._heights: dict[int, int] = {}

    def setText(self, text: str) -> None:
        if text != self.text():
            self._heights.clear()
            super().setText(text)

    def heightForWidth(self, width: int) -> int:
        # Remembered per width until the text or font changes: one layout
        # pass of the scroll area asks at each width from its viewport's
        # down to the viewport's less the scroll bar's (16 widths), and a
        # rich-text label lays out its text again for each (1 to 2 ms, times
        # the plots shown: the bulk of showing the Training workspace).
        height = self._heights.get(width)
        if height is None:
            if len(self._heights) > 64:
                self._heights.clear()
            height = self._heights[width] = super().heightForWidth(width)
        return height

    def changeEvent(self, event: QtCore.QEvent) -> None:
        if event.type() in (
            QtCore.QEvent.Type.FontChange,
            QtCore.QEvent.Type.StyleChange,
        ):
            self._heights.clear()
        super().changeEvent(event)

    def keep_height(self) -> None:
        """Grow the kept height to what the text needs at the current width
        (at a new width, start again from what it needs there)."""
        width = self.width()
        if width <= 0 or not self.testAttribute(QtCore.Qt.WidgetAttribute.WA_Resized):
            return  # never laid out: not at its real width yet
        needed = self.heightForWidth(width)
        if width != self._kept_width:
            self._kept_width = width
            self.setMinimumHeight(needed)
        elif needed > self.minimumHeight():
            self.setMinimumHeight(needed)

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._kept_width not in (-1, event.size().width()):
            self.keep_height()


class _Group(QtWidgets.QFrame):
    """One titled plot with a legend line under it (the legend never covers data)."""

    def __init__(self, title: str, theme: dict[str, str]) -> None:
        super().__init__()
        self.title = title
        self.setObjectName("livePlotGroup")
        self.curves: list[_Curve] = []
        self.keys: list[str] = []
        self.axis = _XAxis()
        self.plot = _PlotWidget(
            axisItems={"bottom": self.axis, "left": _Axis(orientation="left")}
        )
        self.plot.setMinimumHeight(180)
        # The view's background brush covers every pixel: Qt need not paint
        # the frame (a style sheet) under the plot on each frame.
        self.plot.viewport().setAttribute(
            QtCore.Qt.WidgetAttribute.WA_OpaquePaintEvent, True
        )
        item = self.plot.getPlotItem()
        # Grid at major ticks only, opaque, in a dark tone: the axes draw the
        # grid, so every curve update repaints them; minor and alpha-blended
        # lines tripled the paint time of a plot here.
        item.showGrid(x=True, y=True, alpha=1.0)
        for name in ("left", "bottom"):
            item.getAxis(name).setStyle(maxTickLevel=0)
        for name in ("left", "bottom", "top", "right"):
            # The SI prefix rewrites the axis title (rich text) on every range
            # change: a third of the GUI thread's time when runs are selected.
            # Tick labels carry the magnitude instead. The hidden top and
            # right axes follow the view too, so they rewrote theirs as well.
            item.getAxis(name).enableAutoSIPrefix(False)
        item.setMenuEnabled(False)
        item.hideButtons()
        self.view: pg.ViewBox = item.getViewBox()
        self.view.setMouseMode(pg.ViewBox.RectMode)
        self.crosshair = pg.InfiniteLine(angle=90, movable=False)
        self.crosshair.setZValue(100)
        self.crosshair.hide()
        item.addItem(self.crosshair, ignoreBounds=True)
        self.title_label = QtWidgets.QLabel(title)
        self.title_label.setObjectName("livePlotTitle")
        self.legend = _Legend()
        self.legend.setObjectName("livePlotLegend")
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(QtCore.Qt.TextFormat.RichText)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(8, 6, 8, 6)
        lay.setSpacing(2)
        lay.addWidget(self.title_label)
        lay.addWidget(self.plot, 1)
        lay.addWidget(self.legend)
        self.hover_x: float | None = None
        # The curves the legend names; a curve whose first points arrive
        # later (evaluations) changes it.
        self.legend_curves: tuple[tuple[str, str], ...] = ()
        # The panel follows the data on x itself, with headroom, instead of
        # pyqtgraph's x auto-range: a range that changes on every append makes
        # the axes re-layout their ticks and text on every frame (the most
        # expensive part of a paint). Mouse zoom or pan turns following off;
        # a double click turns it back on.
        self.follow_x = True
        self.x_fitted = False
        # y too: pyqtgraph's y auto-range asked every curve for its bounds
        # (nanmin/nanmax of the full data) on every paint and moved the range
        # by a hair on each new point, so the left axis recomputed its ticks
        # each frame: with three runs selected, a third of a slice's GUI
        # time. The panel sets y from the drawn (decimated) points, with
        # headroom, only when they leave the range or fill too little of it.
        self.follow_y = True
        self.y_fitted = False
        self.view.enableAutoRange(x=False, y=False)
        self.apply_theme(theme)

    def apply_theme(self, theme: dict[str, str]) -> None:
        self.theme = theme
        self.plot.setBackground(theme["bg"])
        for name in ("left", "bottom"):
            ax = self.plot.getPlotItem().getAxis(name)
            ax.setPen(pg.mkPen(theme["gridline"]))
            ax.setTextPen(pg.mkPen(theme["fg"]))
        self.crosshair.setPen(
            pg.mkPen(theme["dim"], width=1, style=QtCore.Qt.PenStyle.DashLine)
        )
        self.setStyleSheet(
            f"#livePlotGroup {{ background: {theme['bg']};"
            f" border: 1px solid {theme['frame']}; border-radius: 4px; }}"
            f"#livePlotTitle {{ color: {theme['fg']}; font-weight: 600; }}"
            f"#livePlotLegend {{ color: {theme['fg']}; }}"
        )

    def has_data(self) -> bool:
        return any(len(c.values) for c in self.curves)

    def set_axis_titles(self, y: str, x: str) -> None:
        """Axis titles, in the theme's dim colour (they never change per frame,
        so the axes keep their cached layout)."""
        item = self.plot.getPlotItem()
        style = {"color": self.theme["dim"]}
        if y:
            item.setLabel("left", y, **style)
        item.setLabel("bottom", x, **style)


class _FittedGridLayout(QtWidgets.QGridLayout):
    """The plot grid inside its scroll area, laid out once per change.

    When a plot's legend grows or a plot shows or hides, Qt first lays the
    grid out in the old height of its widget (squeezing or stretching every
    plot), and only then has the scroll area give the widget its new height
    and lays it out again: every plot resized twice, each re-laying out its
    axes and repainting. Here the grid asks for its new height first, while
    the scroll area keeps scrolling (its scroll bar, and so the width, stays)."""

    def __init__(self, host: QtWidgets.QWidget) -> None:
        super().__init__(host)
        self._fitting = False
        self._laid_out = False  # while fitting: the new height was laid out

    def setGeometry(self, rect: QtCore.QRect) -> None:
        host = self.parentWidget()
        viewport = host.parentWidget() if host is not None else None
        if (
            not self._fitting
            and host is not None
            and viewport is not None
            and host.isVisible()
            and rect.height() > viewport.height()
        ):
            wanted = max(viewport.height(), self.totalHeightForWidth(rect.width()))
            if wanted > viewport.height() and wanted != rect.height():
                self._fitting, self._laid_out = True, False
                try:
                    host.resize(rect.width(), wanted)  # lays the grid out
                finally:
                    self._fitting = False
                if host.height() == wanted:
                    if not self._laid_out:  # the resize did not reach the grid
                        super().setGeometry(host.contentsRect())
                    return
        self._laid_out = True
        super().setGeometry(rect)


# ------------------------------------------------------------------ the panel
class LivePlotPanel(QtWidgets.QWidget):
    """Grouped live plots of metric series for several runs at once.

    Feed it with :meth:`set_source` (pull) plus :meth:`add_keys` /
    :meth:`mark_dirty`, or with :meth:`set_curve` (push). Groups without data
    are hidden. Signals: ``smoothing_changed(float)``, ``x_axis_changed(str)``
    (``"step"`` or ``"time"``), ``export_requested(str)`` (``"png"`` or
    ``"csv"``; the host asks for a file name and calls :meth:`export_png` /
    :meth:`export_csv`, or connects it to :meth:`choose_and_export`),
    ``visible_groups_changed(list)``.
    """

    smoothing_changed = QtCore.Signal(float)
    x_axis_changed = QtCore.Signal(str)
    export_requested = QtCore.Signal(str)
    visible_groups_changed = QtCore.Signal(list)

    #: Redraw timer interval in milliseconds (25 Hz).
    REDRAW_INTERVAL_MS = 40
    PARKED_RUNS = 8
    """Removed runs whose hidden curves are kept for when they come back."""

    def __init__(
        self,
        parent: QtWidgets.QWidget | None = None,
        *,
        vocabulary: PlotVocabulary | None = None,
        theme: str = "dark",
        columns: int | None = None,
    ) -> None:
        super().__init__(parent)
        if theme not in _THEMES:
            raise ValueError(f"theme must be one of {sorted(_THEMES)}, not {theme!r}.")
        vocabulary = vocabulary or PlotVocabulary()
        self._rules: list[tuple[str, tuple[str, ...]]] = [
            (t, tuple(p)) for t, p in vocabulary.groups
        ]
        self._ignored = tuple(vocabulary.ignored)
        self._axes = dict(vocabulary.axes)
        self._theme = _THEMES[theme]
        self._theme_name = theme
        self._columns = columns
        self._source: Source | None = None
        self._groups: dict[str, _Group] = {}
        self._curves: dict[tuple[str, str], _Curve] = {}
        # Curves of removed runs, hidden, for a run shown again (see
        # remove_run); the runs in the order they were removed.
        self._parked: dict[tuple[str, str], _Curve] = {}
        self._parked_runs: dict[str, None] = {}
        self._runs: dict[str, dict[str, str]] = {}  # run_id -> {label, color}
        self._dirty: dict[_Curve, None] = {}  # ordered set
        # Curves brought up to date while the panel was hidden in a shown
        # window (another workspace or tab): drawn when it shows again.
        self._undrawn: dict[_Curve, None] = {}  # ordered set
        # Groups whose legend is rewritten at the end of the redraw tick: a
        # selection of runs changes a legend once per curve, and each rewrite
        # lays out its rich text (1 to 2 ms).
        self._stale_legends: dict[_Group, None] = {}  # ordered set
        self._rewritten_legends: dict[_Group, None] = {}  # since the last layout
        # Declared keys whose plot item is not built yet: building one takes
        # 3 to 10 ms, so a selection of three runs (36 curves) is built over
        # a few redraw ticks, within their budget, instead of at once.
        self._pending: dict[tuple[str, str], None] = {}  # ordered set
        self._smoothing = 0.0
        self._x_axis = "step"
        self._visible: list[str] = []
        #: Time budget of one redraw tick in seconds; leftovers wait a tick.
        self.redraw_budget_s = 0.020
        #: Most new points a curve takes in (smooths, indexes) per redraw step.
        self.chunk_points = 262_144
        #: Duration of the last redraw tick in seconds (for diagnostics).
        self.last_redraw_s = 0.0

        self._timer = QtCore.QTimer(self)
        self._timer.setInterval(self.REDRAW_INTERVAL_MS)
        self._timer.timeout.connect(self.redraw_dirty)
        self._build_ui()

    # ----------------------------------------------------------------- UI
    def _build_ui(self) -> None:
        self._smooth_slider = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
        self._smooth_slider.setRange(0, 99)
        self._smooth_slider.setFixedWidth(160)
        self._smooth_slider.setToolTip("Exponential moving average, as in TensorBoard")
        self._smooth_value = QtWidgets.QLabel("0.00")
        self._smooth_value.setMinimumWidth(32)
        self._smooth_slider.valueChanged.connect(self._on_smooth_slider_value_changed)
        self._x_combo = QtWidgets.QComboBox()
        self._x_combo.addItem("Steps", "step")
        self._x_combo.addItem("Wall time", "time")
        self._x_combo.currentIndexChanged.connect(self._on_x_combo_index_changed)
        png = QtWidgets.QPushButton("Export PNG")
        png.clicked.connect(lambda: self.export_requested.emit("png"))
        csv_button = QtWidgets.QPushButton("Export CSV")
        csv_button.clicked.connect(lambda: self.export_requested.emit("csv"))
        self._png_button, self._csv_button = png, csv_button

        bar = QtWidgets.QHBoxLayout()
        bar.setContentsMargins(4, 2, 4, 2)
        bar.addWidget(QtWidgets.QLabel("Smoothing"))
        bar.addWidget(self._smooth_slider)
        bar.addWidget(self._smooth_value)
        bar.addSpacing(16)
        bar.addWidget(QtWidgets.QLabel("X axis"))
        bar.addWidget(self._x_combo)
        bar.addStretch(1)
        bar.addWidget(png)
        bar.addWidget(csv_button)

        self._grid_host = QtWidgets.QWidget()
        self._grid_host.setObjectName("livePlotGrid")
        self._grid = _FittedGridLayout(self._grid_host)
        self._grid.setContentsMargins(4, 4, 4, 4)
        self._grid.setSpacing(6)
        self._empty = QtWidgets.QLabel("No metrics yet")
        self._empty.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
        self._grid.addWidget(self._empty, 0, 0)
        scroll = QtWidgets.QScrollArea()
        scroll.setWidgetResizable(True)
        # The scroll bar's room is always kept: one appearing once the plots
        # outgrow the view (the first show, a run's plots added) narrowed
        # them after they were laid out, so every plot was resized and
        # re-laid out its axes twice in the same turn of the event loop.
        scroll.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        scroll.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        scroll.setWidget(self._grid_host)
        self._scroll = scroll

        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(bar)
        lay.addWidget(scroll, 1)
        self._apply_grid_theme()

    def _apply_grid_theme(self) -> None:
        t = self._theme
        self._grid_host.setStyleSheet(f"#livePlotGrid {{ background: {t['grid']}; }}")
        self._empty.setStyleSheet(f"color: {t['dim']};")

    # ------------------------------------------------------------ data in
    def set_source(self, source: Source | None) -> None:
        """Where curves fetch ``(steps, times, values)`` at redraw time."""
        self._source = source
        for curve in self._curves.values():
            if not curve.explicit:
                self._mark(curve, reset=True)

    def add_run(
        self, run_id: str, label: str | None = None, color: str | None = None
    ) -> str:
        """Show a run (no-op when shown); return its color as ``#rrggbb``."""
        info = self._runs.get(run_id)
        if info is None:
            used = {r["color"] for r in self._runs.values()}
            if color is None:
                free = [c for c in RUN_COLORS if c not in used]
                color = (
                    free[0] if free else RUN_COLORS[len(self._runs) % len(RUN_COLORS)]
                )
            info = self._runs[run_id] = {"label": label or run_id, "color": color}
        else:
            if label is not None:
                self.set_run_label(run_id, label)
            if color is not None and color != info["color"]:
                info["color"] = color
                for c in self._run_curves(run_id):
                    self._style(c)
        return info["color"]

    def set_run_label(self, run_id: str, label: str) -> None:
        # Unchanged (a host showing its selection again): no legend is
        # rewritten; each rewrite lays out rich text (1 to 2 ms per plot).
        if run_id in self._runs and self._runs[run_id]["label"] != label:
            self._runs[run_id]["label"] = label
            for group in {c.group for c in self._run_curves(run_id)}:
                self._update_legend(group)

    def runs(self) -> list[str]:
        return list(self._runs)

    def run_color(self, run_id: str) -> str | None:
        info = self._runs.get(run_id)
        return info["color"] if info else None

    def add_keys(self, run_id: str, keys: Iterable[str]) -> None:
        """Declare metric keys of a run; their data is fetched from the source.

        A curve shown before (parked) comes back at once; a new one is built
        on the next redraw ticks (:meth:`pending_redraws` counts it)."""
        self.add_run(run_id)
        for key in keys:
            curve = self._curves.get((run_id, key))
            if curve is None and (run_id, key) in self._parked:
                curve = self._curve(run_id, key, create=True)
            if curve is not None:
                self._mark(curve)
            elif (run_id, key) not in self._pending:
                self._pending[(run_id, key)] = None
                if not self._timer.isActive():
                    self._timer.start()

    def mark_dirty(self, run_id: str, keys: Iterable[str] | None = None) -> None:
        """Series of a run grew (``keys`` None: all its keys); redraw next tick.

        Unknown keys are added, so a host may call only this.
        """
        if keys is None:
            for curve in self._run_curves(run_id):
                self._mark(curve)
            return
        self.add_keys(run_id, keys)

    def set_curve(
        self,
        run_id: str,
        key: str,
        steps: np.ndarray,
        values: np.ndarray,
        times: np.ndarray | None = None,
    ) -> None:
        """Push a whole series (replaces what the curve had; not append-only)."""
        steps = np.asarray(steps, dtype=np.float64)
        values = np.asarray(values, dtype=np.float64)
        if steps.shape != values.shape:
            raise ValueError("steps and values must have the same length.")
        times = steps if times is None else np.asarray(times, dtype=np.float64)
        if times.shape != values.shape:
            raise ValueError("times and values must have the same length.")
        self.add_run(run_id)
        self._pending.pop((run_id, key), None)
        curve = self._curve(run_id, key, create=True)
        if curve is None:
            return
        curve.explicit = True
        curve.steps, curve.times, curve.values = steps, times, values
        self._mark(curve, reset=True)
        curve.needs_fetch = False

    def remove_run(self, run_id: str) -> None:
        """Stop showing a run (its color becomes free again).

        Its curves are hidden and parked rather than destroyed: selecting the
        run again (the user going back and forth between runs) shows them
        without building a plot item per metric, which took 3 ms each."""
        groups: dict[_Group, None] = {}
        for pending in [k for k in self._pending if k[0] == run_id]:
            del self._pending[pending]
        for curve in list(self._run_curves(run_id)):
            curve.item.hide()
            curve.group.curves.remove(curve)
            self._dirty.pop(curve, None)
            self._undrawn.pop(curve, None)
            del self._curves[(curve.run_id, curve.key)]
            self._parked[(curve.run_id, curve.key)] = curve
            groups[curve.group] = None
        for group in groups:
            self._queue_legend(group)
        if groups:
            self._parked_runs.pop(run_id, None)
            self._parked_runs[run_id] = None
        while len(self._parked_runs) > self.PARKED_RUNS:
            oldest = next(iter(self._parked_runs))
            del self._parked_runs[oldest]
            for key in [k for k in self._parked if k[0] == oldest]:
                curve = self._parked.pop(key)
                curve.group.plot.getPlotItem().removeItem(curve.item)
        self._runs.pop(run_id, None)
        for group in self._groups.values():
            if group.follow_x or group.follow_y:
                group.x_fitted = group.y_fitted = False
                self._on_view_changed(group)
        # Which plots show is settled on the next redraw tick: a host that
        # swaps runs (remove one, add another) must not hide every plot and
        # lay the grid out twice in between.
        if not self._timer.isActive():
            self._timer.start()

    def clear(self) -> None:
        for run_id in list(self._runs):
            self.remove_run(run_id)

    # ------------------------------------------------------------ settings
    def smoothing(self) -> float:
        return self._smoothing

    def set_smoothing(self, weight: float) -> None:
        """EMA weight in [0, 0.99]; 0 draws raw data."""
        weight = round(min(max(float(weight), 0.0), 0.99), 2)
        if weight == self._smoothing:
            return
        self._smoothing = weight
        with QtCore.QSignalBlocker(self._smooth_slider):
            self._smooth_slider.setValue(round(weight * 100))
        self._smooth_value.setText(f"{weight:.2f}")
        for curve in self._curves.values():
            self._mark(curve)
        self.smoothing_changed.emit(weight)

    def x_axis(self) -> str:
        return self._x_axis

    def set_x_axis(self, mode: str) -> None:
        """``"step"`` or ``"time"`` (wall time in seconds since the run started)."""
        if mode not in X_AXES:
            raise ValueError(f"x axis must be 'step' or 'time', not {mode!r}.")
        if mode == self._x_axis:
            return
        self._x_axis = mode
        with QtCore.QSignalBlocker(self._x_combo):
            self._x_combo.setCurrentIndex(X_AXES.index(mode))
        for group in self._groups.values():
            group.axis.mode = mode
            group.set_axis_titles(self._axes.get(group.title, ""), X_AXIS_TITLES[mode])
            group.axis.picture = None
            group.axis.update()
            self.reset_view(group.title)
            self._set_hover(group, None)
        for curve in self._curves.values():
            self._mark(curve)
        self.x_axis_changed.emit(mode)

    def set_x_range(self, lo: float, hi: float, title: str | None = None) -> None:
        """Zoom a plot (or all) to ``[lo, hi]`` on x; stops following new data."""
        groups = self._groups.values() if title is None else [self._groups[title]]
        for group in groups:
            group.follow_x = False
            group.view.setXRange(lo, hi, padding=0)

    def reset_view(self, title: str | None = None) -> None:
        """Fit a plot (or all) to its data again and follow new data on x."""
        groups = self._groups.values() if title is None else [self._groups[title]]
        for group in groups:
            group.follow_x = group.follow_y = True
            group.x_fitted = group.y_fitted = False
            self._on_view_changed(group)

    def set_theme(self, theme: str) -> None:
        if theme not in _THEMES:
            raise ValueError(f"theme must be one of {sorted(_THEMES)}, not {theme!r}.")
        self._theme_name, self._theme = theme, _THEMES[theme]
        for group in self._groups.values():
            group.apply_theme(self._theme)
            self._update_legend(group)
        self._apply_grid_theme()

    # ------------------------------------------------------------ queries
    def group_titles(self, visible_only: bool = True) -> list[str]:
        """Group titles in display order (only shown ones by default)."""
        if visible_only:
            return list(self._visible)
        return [g for g in self._ordered_titles() if g in self._groups]

    def plot_widget(self, title: str) -> pg.PlotWidget:
        return self._groups[title].plot

    def group_widget(self, title: str) -> QtWidgets.QWidget:
        return self._groups[title]

    def legend_text(self, title: str) -> str:
        """The legend / hover readout under a plot, as plain text."""
        self._flush_legends()
        doc = QtGui.QTextDocument()
        doc.setHtml(self._groups[title].legend.text())
        return doc.toPlainText().replace("\u2060", "").replace("\xa0", " ")

    def curve_keys(self, title: str) -> list[tuple[str, str]]:
        """``(run_id, key)`` of the curves in a group."""
        return [(c.run_id, c.key) for c in self._groups[title].curves]

    def curve_data(self, run_id: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        """The ``(x, y)`` last given to pyqtgraph for a curve (decimated)."""
        return self._curves[(run_id, key)].drawn

    def series(self, run_id: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Full-resolution ``(x, y)`` of a curve as drawn (x per axis, y smoothed)."""
        curve = self._curves[(run_id, key)]
        return curve.x(self._x_axis), curve.display_y()

    def pending_redraws(self) -> int:
        """Curves waiting to be built or drawn."""
        return len(self._dirty) + len(self._pending)

    # ------------------------------------------------------------ redraw
    def redraw_dirty(self) -> int:
        """Redraw dirty curves (the timer's slot); return how many were drawn.

        Stops after :attr:`redraw_budget_s` (at least one step per tick) and
        takes in at most :attr:`chunk_points` new points per curve and step,
        so the event loop stays responsive; the rest waits for the next tick.
        """
        t0 = time.perf_counter()
        unbounded = math.isinf(self.redraw_budget_s)
        limit = None if unbounded else self.chunk_points
        # Hidden behind another workspace or tab, the panel keeps its data up
        # to date (and which plots have any) but draws when it shows again.
        deferred = not unbounded and self._hidden_in_window()
        drawn = 0
        touched: dict[_Group, None] = {}
        for run_id, key in list(self._pending):
            # At least one per tick; drawn in this tick if time is left.
            del self._pending[(run_id, key)]
            built = self._curve(run_id, key, create=True)
            if built is not None:
                self._mark(built)
            if time.perf_counter() - t0 > self.redraw_budget_s:
                break
        for curve in list(self._dirty):
            if time.perf_counter() - t0 > self.redraw_budget_s:
                break  # the builds took this tick
            del self._dirty[curve]
            if self._refresh(curve, limit, draw=not deferred):
                drawn += 1
            else:
                self._dirty[curve] = None  # more to take in: next tick
            if deferred:
                self._undrawn[curve] = None
            else:
                touched[curve.group] = None
            if time.perf_counter() - t0 > self.redraw_budget_s:
                break
        for group in touched:
            self._follow(group)
            if group.hover_x is not None:  # the readout, once per plot
                self._set_hover(group, group.hover_x)
            if _shown_curves(group) != group.legend_curves:
                self._queue_legend(group)
        self._update_visibility()
        self._flush_legends()
        if not self._dirty and not self._pending:
            self._timer.stop()
        self.last_redraw_s = time.perf_counter() - t0
        return drawn

    def redraw_all(self) -> None:
        """Draw every dirty curve now, ignoring budgets (tests, export)."""
        budget = self.redraw_budget_s
        self.redraw_budget_s = math.inf
        self._redraw_undrawn()
        try:
            while self._dirty or self._pending:
                self.redraw_dirty()
        finally:
            self.redraw_budget_s = budget

    def _refresh(self, curve: _Curve, limit: int | None, draw: bool = True) -> bool:
        """Bring a curve's display up to date and draw it (unless ``draw`` is
        False); False if unfinished."""
        if curve.needs_fetch and not curve.explicit and self._source is not None:
            steps, times, values = self._source(curve.run_id, curve.key)
            if len(values) < len(curve.values):
                curve.needs_reset = True
            curve.steps, curve.times, curve.values = steps, times, values
        curve.needs_fetch = False
        w = self._smoothing
        disp = curve.display
        if disp is None or disp.weight != w or curve.needs_reset:
            new = curve.building
            if new is None or new.weight != w or curve.needs_reset:
                new = curve.building = _Display(w)
                curve.needs_reset = False
            if not new.advance(curve.values, limit):
                return False  # keep drawing the old display meanwhile
            curve.display, curve.building = new, None
            complete = True
        else:
            complete = disp.advance(curve.values, limit)
        if draw:
            self._draw(curve)
        return complete

    def _hidden_in_window(self) -> bool:
        """Whether the panel's window shows but the panel does not."""
        return not self.isVisible() and self.window().isVisible()

    def _redraw_undrawn(self) -> None:
        """Queue the curves left undrawn while the panel was hidden."""
        for curve in self._undrawn:
            if self._curves.get((curve.run_id, curve.key)) is curve:
                self._dirty[curve] = None
        self._undrawn.clear()
        if self._dirty and not self._timer.isActive():
            self._timer.start()

    def _draw(self, curve: _Curve) -> None:
        disp = curve.display
        assert disp is not None
        y = disp.y(curve.values)
        n = len(y)
        x = curve.x(self._x_axis)[:n]
        view = curve.group.view
        width = max(100, int(view.width()))
        span = view.viewRange()[0]
        if curve.group.follow_x or n == 0:
            i0, i1 = 0, n
        else:
            i0 = max(0, int(np.searchsorted(x, span[0], "left")) - 1)
            i1 = min(n, int(np.searchsorted(x, span[1], "right")) + 1)
        request = (id(disp), n, i0, i1, width, *span, self._x_axis)
        if request == curve.last_request:
            return
        curve.last_request = request
        columns = disp.pyramid.columns(x, y, i0, i1, (span[0], span[1]), width)
        xd, yd = (x[i0:i1], y[i0:i1]) if columns is None else columns
        # A 2 px pen for a few raw points; Qt strokes wide pens about 10x
        # slower, and an envelope (max and min per pixel column) with one
        # was 130 ms a frame for 12 curves here. An envelope's segments are
        # vertical or one pixel wide, where antialiasing shows little and
        # cost a tenth of the frame.
        wide = columns is None and len(xd) <= _WIDE_PEN_MAX_POINTS
        if wide != curve.wide:
            curve.wide = wide
            self._style(curve)
        curve.item.setAntialias(columns is None)
        curve.item.setData(xd, yd)
        curve.drawn = (xd, yd)

    # ------------------------------------------------------------ hover
    def hover_text(self, title: str, x: float) -> str:
        """Plain text of the readout for the point nearest ``x`` on each curve."""
        self._set_hover(self._groups[title], x)
        return self.legend_text(title)

    def _set_hover(self, group: _Group, x: float | None) -> None:
        group.hover_x = x
        if x is None:
            group.crosshair.hide()
        else:
            group.crosshair.setPos(x)
            group.crosshair.show()
        self._update_legend(group)
        self._settle_grid()

    def _nearest(self, curve: _Curve, x: float) -> tuple[float, float] | None:
        xs = curve.x(self._x_axis)
        ys = curve.display_y()
        n = min(len(xs), len(ys))
        if n == 0:
            return None
        i = int(np.searchsorted(xs[:n], x))
        if i >= n or (i > 0 and abs(xs[i - 1] - x) <= abs(xs[i] - x)):
            i = max(0, min(i, n) - 1)
        return float(xs[i]), float(ys[i])

    def _on_scene_mouse_moved(self, group: _Group, pos: QtCore.QPointF) -> None:
        if group.view.sceneBoundingRect().contains(pos):
            self._set_hover(group, group.view.mapSceneToView(pos).x())
        elif group.hover_x is not None:
            self._set_hover(group, None)

    def eventFilter(self, obj: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if event.type() == QtCore.QEvent.Type.Leave:
            for group in self._groups.values():
                if group.plot is obj and group.hover_x is not None:
                    self._set_hover(group, None)
        return super().eventFilter(obj, event)

    # ------------------------------------------------------------ export
    def export_png(self, path: str | Path, group: str | None = None) -> Path:
        """Save the visible plots (or one group) as a PNG image."""
        self.redraw_all()
        widget = self._grid_host if group is None else self._groups[group]
        path = Path(path)
        if not widget.grab().save(str(path), "PNG"):
            raise OSError(f"Could not write the image to {path}.")
        return path

    def export_csv(self, path: str | Path, *, visible_range_only: bool = False) -> int:
        """Write the curves of visible groups as CSV; return the number of rows.

        Columns: ``run, key, step, time, value`` and ``smoothed`` when
        smoothing is on. With ``visible_range_only`` only points inside each
        plot's current x range are written.
        """
        self.redraw_all()
        smoothing = self._smoothing > 0
        header = ["run", "key", "step", "time", "value"] + (
            ["smoothed"] if smoothing else []
        )
        rows = 0
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            for title in self._visible:
                group = self._groups[title]
                lo, hi = (
                    group.view.viewRange()[0]
                    if visible_range_only
                    else (-math.inf, math.inf)
                )
                for curve in group.curves:
                    n = len(curve.values)
                    i0, i1 = 0, n
                    if visible_range_only:
                        x = curve.x(self._x_axis)
                        i0 = int(np.searchsorted(x, lo, "left"))
                        i1 = int(np.searchsorted(x, hi, "right"))
                    cols = [
                        curve.steps[i0:i1].tolist(),
                        curve.times[i0:i1].tolist(),
                        curve.values[i0:i1].tolist(),
                    ]
                    if smoothing:
                        cols.append(curve.display_y()[i0:i1].tolist())
                    label = self._runs[curve.run_id]["label"]
                    for vals in zip(*cols, strict=True):
                        writer.writerow(
                            (
                                label,
                                curve.key,
                                f"{vals[0]:.0f}",
                                *(repr(v) for v in vals[1:]),
                            )
                        )
                    rows += i1 - i0
        return rows

    def choose_and_export(self, kind: str) -> Path | None:
        """Ask for a file name with a dialog and export (``"png"`` or ``"csv"``)."""
        if kind not in ("png", "csv"):
            raise ValueError(f"export kind must be 'png' or 'csv', not {kind!r}.")
        filt = "PNG image (*.png)" if kind == "png" else "CSV file (*.csv)"
        name, _ = QtWidgets.QFileDialog.getSaveFileName(
            self, "Export plots", f"metrics.{kind}", filt
        )
        if not name:
            return None
        if kind == "png":
            return self.export_png(name)
        self.export_csv(name)
        return Path(name)

    # ------------------------------------------------------------ internals
    def _ordered_titles(self) -> list[str]:
        return [t for t, _ in self._rules] + [OTHER_GROUP]

    def _run_curves(self, run_id: str) -> list[_Curve]:
        return [c for (r, _), c in self._curves.items() if r == run_id]

    def _mark(self, curve: _Curve, reset: bool = False) -> None:
        curve.needs_fetch = True
        if reset:
            curve.needs_reset = True
            curve.last_request = None
        self._dirty[curve] = None
        if not self._timer.isActive():
            self._timer.start()

    def _curve(self, run_id: str, key: str, create: bool) -> _Curve | None:
        curve = self._curves.get((run_id, key))
        if curve is not None or not create:
            return curve
        title = group_for_key(key, self._rules, self._ignored)
        if title is None:
            return None
        group = self._group(title)
        curve = self._parked.pop((run_id, key), None)
        if curve is not None and curve.group is group:
            # Shown again: its old points stay on screen until the fresh
            # fetch is drawn.
            curve.item.show()
            curve.explicit = False
            curve.last_request = None
            curve.needs_reset = True
        else:
            if curve is not None:
                curve.group.plot.getPlotItem().removeItem(curve.item)
            item = _Line()
            group.plot.getPlotItem().addItem(item)
            curve = _Curve(run_id=run_id, key=key, group=group, item=item)
        restyle = False
        if key not in group.keys:
            group.keys.append(key)
            # Line styles follow the order keys are listed in the group rules
            # (training curve solid, evaluation dashed), not the order they
            # happened to arrive in.
            ranked = sorted(group.keys, key=lambda k: self._key_rank(title, k))
            restyle = ranked != group.keys
            group.keys[:] = ranked
        group.curves.append(curve)
        group.curves.sort(
            key=lambda c: (list(self._runs).index(c.run_id), group.keys.index(c.key))
        )
        self._curves[(run_id, key)] = curve
        for other in group.curves if restyle else [curve]:
            self._style(other)
        self._queue_legend(group)
        return curve

    def _group(self, title: str) -> _Group:
        group = self._groups.get(title)
        if group is None:
            group = self._groups[title] = _Group(title, self._theme)
            group.axis.mode = self._x_axis
            group.set_axis_titles(
                self._axes.get(title, ""), X_AXIS_TITLES[self._x_axis]
            )
            group.hide()
            group.plot.scene().sigMouseMoved.connect(
                lambda pos, g=group: self._on_scene_mouse_moved(g, pos)
            )
            group.plot.installEventFilter(self)
            group.view.sigXRangeChanged.connect(
                lambda *_, g=group: self._on_view_changed(g)
            )
            group.view.sigResized.connect(lambda *_, g=group: self._on_view_changed(g))
            group.view.sigRangeChangedManually.connect(
                lambda *_, g=group: self._on_view_range_changed_manually(g)
            )
            group.plot.scene().sigMouseClicked.connect(
                lambda ev, g=group: self._on_scene_mouse_clicked(g, ev)
            )
        return group

    def _on_view_range_changed_manually(self, group: _Group) -> None:
        group.follow_x = group.follow_y = False

    def _on_scene_mouse_clicked(self, group: _Group, event: object) -> None:
        if getattr(event, "double", lambda: False)():
            self.reset_view(group.title)

    def _follow(self, group: _Group) -> None:
        """Keep the data in view on the axes the plot follows, moving both
        ranges in one change (each change re-lays out the axes' ticks and
        redraws the plot's curves)."""
        x = self._follow_x(group) if group.follow_x else None
        y = self._follow_y(group) if group.follow_y else None
        if x is not None and y is not None:
            group.view.setRange(xRange=x, yRange=y, padding=0)
        elif x is not None:
            group.view.setXRange(*x, padding=0)
        elif y is not None:
            group.view.setYRange(*y, padding=0)

    def _follow_x(self, group: _Group) -> tuple[float, float] | None:
        """The x range that keeps all data in view, changing only now and
        then (None: keep the current one)."""
        lo, hi = math.inf, -math.inf
        for curve in group.curves:
            if curve.display is None or curve.display.n == 0:
                continue
            x = curve.x(self._x_axis)
            lo = min(lo, float(x[0]))
            hi = max(hi, float(x[curve.display.n - 1]))
        if lo > hi:
            return None
        new = _followed_range(
            group.view.viewRange()[0], lo, hi, group.x_fitted, margins=(0.02, 0.08)
        )
        if new is not None:
            group.x_fitted = True
        return new

    def _follow_y(self, group: _Group) -> tuple[float, float] | None:
        """The y range that keeps the drawn points in view, changing only when
        they leave it or fill less than two thirds of it (None: keep it)."""
        lo, hi = math.inf, -math.inf
        for curve in group.curves:
            y = curve.drawn[1]
            if len(y) and curve.item.isVisible():
                lo = min(lo, float(np.nanmin(y)))
                hi = max(hi, float(np.nanmax(y)))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        new = _followed_range(
            group.view.viewRange()[1], lo, hi, group.y_fitted, margins=(0.08, 0.08)
        )
        if new is not None:
            group.y_fitted = True
        return new

    def _on_view_changed(self, group: _Group) -> None:
        if not shiboken6.isValid(self._timer):
            return  # the panel is being destroyed (its views resize on the way)
        for curve in group.curves:
            self._dirty[curve] = None
        if group.curves and not self._timer.isActive():
            self._timer.start()

    def _key_rank(self, title: str, key: str) -> int:
        """Position of the first rule pattern of group ``title`` that ``key``
        matches; keys no rule lists (the Other group) keep arrival order."""
        patterns = next((pats for t, pats in self._rules if t == title), ())
        for i, pattern in enumerate(patterns):
            if key == pattern or fnmatch.fnmatchcase(key, pattern):
                return i
        return len(patterns)

    def _style(self, curve: _Curve) -> None:
        color = self._runs[curve.run_id]["color"]
        style = _LINE_STYLES[curve.group.keys.index(curve.key) % len(_LINE_STYLES)]
        width = 2 if curve.wide else 1
        if curve.style == (color, width, style):
            return  # a new pen re-sets the item's data (a run shown again)
        curve.style = (color, width, style)
        curve.item.setPen(pg.mkPen(color, width=width, style=style))
        if curve.key.startswith("eval/"):
            curve.item.setSymbols(5, pg.mkBrush(color))

    def _queue_legend(self, group: _Group) -> None:
        """Rewrite a legend at the end of the redraw tick (or when read)."""
        self._stale_legends[group] = None
        if not self._timer.isActive():
            self._timer.start()

    def _flush_legends(self) -> None:
        while self._stale_legends:
            self._update_legend(next(iter(self._stale_legends)))
        self._settle_grid()

    def _settle_grid(self) -> None:
        """Lay the grid out now for legends that were rewritten.

        Left to Qt, a plot whose legend needs another line is laid out
        first in its old height (the plot shrinks), and only then does the
        grid give it the taller height (the plot grows back): two resizes
        of the plot, each re-laying out its axes. The grid laid out first
        gives the plot its room in one step."""
        groups, self._rewritten_legends = self._rewritten_legends, {}
        if not groups or not self._grid_host.isVisible():
            return
        for group in groups:
            group.updateGeometry()
        self._grid.activate()

    def _update_legend(self, group: _Group) -> None:
        self._stale_legends.pop(group, None)
        fg, dim = group.theme["fg"], group.theme["dim"]
        shown = [c for c in group.curves if len(c.values)]
        group.legend_curves = _shown_curves(group)
        runs = list(dict.fromkeys(c.run_id for c in shown))
        keys = list(dict.fromkeys(c.key for c in shown))
        hover_x = group.hover_x
        hovering = hover_x is not None
        parts = []
        if hover_x is not None:
            parts.append(
                f"<span style='color:{dim}'>{self._x_label()}&nbsp;"
                f"{_format_x(self._x_axis, hover_x)}</span>"
            )
        if len(runs) > 1 and len(keys) > 1 and not hovering:
            # Compact: colors name the runs, line styles name the keys.
            for run_id in runs:
                info = self._runs[run_id]
                parts.append(
                    f"<span style='color:{info['color']}'>■</span>"
                    f"&nbsp;<span style='color:{fg}'>{_html(info['label'])}</span>"
                )
            for key in keys:
                parts.append(
                    f"<span style='color:{dim}'>{_swatch(group, key)}&nbsp;"
                    f"{_html(key)}</span>"
                )
        else:
            for curve in shown:
                info = self._runs[curve.run_id]
                if len(keys) == 1:
                    name = info["label"]
                elif len(runs) == 1:
                    name = curve.key
                else:
                    name = f"{info['label']} · {curve.key}"
                text = (
                    f"<span style='color:{info['color']}'>{_swatch(group, curve.key)}"
                    f"</span>&nbsp;<span style='color:{fg}'>{_html(name)}</span>"
                )
                near = self._nearest(curve, hover_x) if hover_x is not None else None
                if near is not None:
                    text += (
                        f"&nbsp;<b style='color:{fg}'>{near[1]:.4g}</b>"
                        f"<span style='color:{dim}'>&nbsp;@&nbsp;"
                        f"{_format_x(self._x_axis, near[0])}</span>"
                    )
                parts.append(text)
        text = "&nbsp;&nbsp;&nbsp; ".join(parts)
        if text != group.legend.text():
            group.legend.setText(text)
            group.legend.keep_height()
            self._rewritten_legends[group] = None

    def _x_label(self) -> str:
        return "step" if self._x_axis == "step" else "time"

    def _update_visibility(self) -> None:
        visible = [
            t
            for t in self._ordered_titles()
            if t in self._groups and self._groups[t].has_data()
        ]
        if visible == self._visible:
            return
        self._visible = visible
        for group in self._groups.values():
            self._queue_legend(group)
        self._relayout()
        self.visible_groups_changed.emit(list(visible))

    def _column_count(self) -> int:
        if self._columns:
            return self._columns
        width = self.width()
        return 1 if width < 700 else (2 if width < 1500 else 3)

    def _relayout(self) -> None:
        cols = self._column_count()
        for group in self._groups.values():
            self._grid.removeWidget(group)
        self._grid.removeWidget(self._empty)
        for c in range(4):
            self._grid.setColumnStretch(c, 0)
        for i, title in enumerate(self._visible):
            group = self._groups[title]
            self._grid.addWidget(group, i // cols, i % cols)
            group.show()
        for title, group in self._groups.items():
            if title not in self._visible:
                group.hide()
        for c in range(min(cols, max(1, len(self._visible)))):
            self._grid.setColumnStretch(c, 1)
        self._empty.setVisible(not self._visible)
        if not self._visible:
            self._grid.addWidget(self._empty, 0, 0)
        self._layout_cols = cols

    def showEvent(self, event: QtGui.QShowEvent) -> None:
        super().showEvent(event)
        self._redraw_undrawn()

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:
        super().resizeEvent(event)
        if (
            self._visible
            and getattr(self, "_layout_cols", None) != self._column_count()
        ):
            self._relayout()

    # ------------------------------------------------------------ slots
    def _on_smooth_slider_value_changed(self, value: int) -> None:
        self.set_smoothing(value / 100.0)

    def _on_x_combo_index_changed(self, index: int) -> None:
        self.set_x_axis(self._x_combo.itemData(index))


def _shown_curves(group: _Group) -> tuple[tuple[str, str], ...]:
    return tuple((c.run_id, c.key) for c in group.curves if len(c.values))


def _html(text: str) -> str:
    """Escape for Qt rich text; keep a key on one line (no break after '/')."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace(" ", "&nbsp;").replace("/", "/\u2060")


def _swatch(group: _Group, key: str) -> str:
    return ("━━", "╍╍", "┅┅", "━╍")[group.keys.index(key) % len(_LINE_STYLES)]
