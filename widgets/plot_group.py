"""One plot of a live plot panel: a titled pyqtgraph plot of its curves with
a legend line under it, the axes that write steps and wall time, and the
view that follows the data. Used by ``widgets.live_plot``."""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from widgets.integer_axis import IntegerAxis
from widgets.plot_series import Curve

SERIES_COLORS: tuple[str, ...] = (
    "#56b4e9",
    "#e69f00",
    "#009e73",
    "#d55e00",
    "#cc79a7",
    "#0072b2",
    "#b8a300",
    "#8f8f8f",
)
"""The colours of one run's series, in the key order of the group:
Okabe and Ito's colour-blind-safe set (its yellow darkened and grey for
black, so every one reads on the light and the dark theme; sky blue first,
which reads best on both)."""
LINE_STYLES = (
    QtCore.Qt.PenStyle.SolidLine,
    QtCore.Qt.PenStyle.DashLine,
    QtCore.Qt.PenStyle.DotLine,
    QtCore.Qt.PenStyle.DashDotLine,
)
THEMES = {
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
#: The x axis title for each x mode.
X_AXIS_TITLES: dict[str, str] = {"step": "steps", "time": "wall time (s)"}


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


def format_x(mode: str, v: float) -> str:
    return f"{v:,.0f}" if mode == "step" else _format_duration(v)


def followed_range(
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


class MeasuringPainter:
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
class _Axis(IntegerAxis):
    """An axis whose tick labels are measured once (see MeasuringPainter);
    ``integer``: ticks on whole numbers only (a stage is never 1.5)."""

    def __init__(self, orientation: str, integer: bool = False) -> None:
        super().__init__(orientation, integer)

    def generateDrawSpecs(self, p: QtGui.QPainter) -> Any:
        return super().generateDrawSpecs(MeasuringPainter(p))


class _XAxis(_Axis):
    """Bottom axis that writes steps as 250k / 1.5M and wall time as h:mm:ss."""

    def __init__(self) -> None:
        super().__init__("bottom")
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


class PlotGroup(QtWidgets.QFrame):
    """One titled plot with a legend line under it (the legend never covers data)."""

    hovered = QtCore.Signal(object)
    """The pointer is over the plot at this x (None: it left)."""
    view_changed = QtCore.Signal()
    """The view's x range or size changed: its curves need drawing again."""
    reset_requested = QtCore.Signal()
    """A double click: fit the view to the data and follow it again."""
    series_toggled = QtCore.Signal(str, bool)
    """A legend entry was clicked: its series (``run:<id>``, ``key:<key>`` or
    ``curve:<id> <key>``) is now shown (True) or hidden (False)."""

    def __init__(
        self, title: str, theme: dict[str, str], integer_y: bool = False
    ) -> None:
        super().__init__()
        self.title = title
        self.setObjectName("livePlotGroup")
        self.curves: list[Curve[PlotGroup]] = []
        self.keys: list[str] = []
        self.axis = _XAxis()
        self.plot = _PlotWidget(
            axisItems={"bottom": self.axis, "left": _Axis("left", integer_y)}
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
        # Each entry is a link: a click hides its series, another shows it.
        self.legend.setTextInteractionFlags(
            QtCore.Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        self.legend.linkActivated.connect(self._on_legend_link_activated)
        self.hidden: set[str] = set()
        """The legend entries clicked off (see :attr:`series_toggled`)."""
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
        self.plot.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)
        self.plot.scene().sigMouseClicked.connect(self._on_scene_mouse_clicked)
        self.plot.installEventFilter(self)
        self.view.sigXRangeChanged.connect(lambda *_: self.view_changed.emit())
        self.view.sigResized.connect(lambda *_: self.view_changed.emit())
        self.view.sigRangeChangedManually.connect(self._on_view_range_changed_manually)

    def set_x_mode(self, mode: str, y_title: str, step_title: str = "steps") -> None:
        """Write the x axis in ``mode`` (``"step"`` or ``"time"``), titled
        ``step_title`` in steps (what a step counts: ``episodes``)."""
        self.axis.mode = mode
        x_title = step_title if mode == "step" else X_AXIS_TITLES[mode]
        self.set_axis_titles(y_title, x_title)
        self.axis.picture = None
        self.axis.update()

    def _on_scene_mouse_moved(self, pos: QtCore.QPointF) -> None:
        if self.view.sceneBoundingRect().contains(pos):
            self.hovered.emit(self.view.mapSceneToView(pos).x())
        elif self.hover_x is not None:
            self.hovered.emit(None)

    def _on_scene_mouse_clicked(self, event: object) -> None:
        if getattr(event, "double", lambda: False)():
            self.reset_requested.emit()

    def _on_legend_link_activated(self, link: str) -> None:
        series = urllib.parse.unquote(link)
        shown = series in self.hidden
        if shown:
            self.hidden.discard(series)
        else:
            self.hidden.add(series)
        for curve in self.curves:
            self.show_if_wanted(curve)
        self.series_toggled.emit(series, shown)

    def is_hidden(self, curve: Curve[PlotGroup]) -> bool:
        """Whether a legend click hid the curve (its run, key or itself)."""
        return bool(
            self.hidden
            & {
                f"run:{curve.run_id}",
                f"key:{curve.key}",
                f"curve:{curve.run_id} {curve.key}",
            }
        )

    def show_if_wanted(self, curve: Curve[PlotGroup]) -> None:
        """Show the curve unless a legend click hid it."""
        curve.item.setVisible(not self.is_hidden(curve))

    def _entry(self, series: str, html: str) -> str:
        """A legend entry that toggles ``series`` when clicked; a hidden one
        is struck through and dimmed."""
        if series in self.hidden:
            html = f"<s style='color:{self.theme['dim']}'>{html}</s>"
        href = urllib.parse.quote(series, safe="")
        return f"<a href='{href}' style='text-decoration:none'>{html}</a>"

    def _on_view_range_changed_manually(self, *_: object) -> None:
        self.follow_x = self.follow_y = False

    def eventFilter(self, obj: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if (
            obj is self.plot
            and event.type() == QtCore.QEvent.Type.Leave
            and self.hover_x is not None
        ):
            self.hovered.emit(None)
        return super().eventFilter(obj, event)

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

    def add_curve(
        self, curve: Curve[PlotGroup], run_order: list[str], rank: Callable[[str], int]
    ) -> bool:
        """Take in a curve, its key ranked by ``rank`` and the curves ordered
        by run (in ``run_order``), then key; True when the keys' order (so
        their line styles) or the curves' colouring changed."""
        one_run = self.one_run()
        restyle = False
        if curve.key not in self.keys:
            self.keys.append(curve.key)
            # Line styles follow the order keys are listed in the group rules
            # (training curve solid, evaluation dashed), not the order they
            # happened to arrive in.
            ranked = sorted(self.keys, key=rank)
            restyle = ranked != self.keys
            self.keys[:] = ranked
        self.curves.append(curve)
        self.curves.sort(
            key=lambda c: (run_order.index(c.run_id), self.keys.index(c.key))
        )
        # A second run turns the series' colours into the runs' colours.
        return restyle or one_run != self.one_run()

    def set_hover(self, x: float | None) -> None:
        """Read out the curves at ``x`` (None: not hovering), under a line."""
        self.hover_x = x
        if x is None:
            self.crosshair.hide()
        else:
            self.crosshair.setPos(x)
            self.crosshair.show()

    # ------------------------------------------------------------ following
    def follow(self, x_axis: str) -> None:
        """Keep the data in view on the axes the plot follows, moving both
        ranges in one change (each change re-lays out the axes' ticks and
        redraws the plot's curves)."""
        x = self._follow_x(x_axis) if self.follow_x else None
        y = self._follow_y() if self.follow_y else None
        if x is not None and y is not None:
            self.view.setRange(xRange=x, yRange=y, padding=0)
        elif x is not None:
            self.view.setXRange(*x, padding=0)
        elif y is not None:
            self.view.setYRange(*y, padding=0)

    def _follow_x(self, x_axis: str) -> tuple[float, float] | None:
        """The x range that keeps all data in view, changing only now and
        then (None: keep the current one)."""
        lo, hi = math.inf, -math.inf
        for curve in self.curves:
            if curve.display is None or curve.display.n == 0:
                continue
            x = curve.x(x_axis)
            lo = min(lo, float(x[0]))
            hi = max(hi, float(x[curve.display.n - 1]))
        if lo > hi:
            return None
        new = followed_range(
            self.view.viewRange()[0], lo, hi, self.x_fitted, margins=(0.02, 0.08)
        )
        if new is not None:
            self.x_fitted = True
        return new

    def _follow_y(self) -> tuple[float, float] | None:
        """The y range that keeps the drawn points in view, changing only when
        they leave it or fill less than two thirds of it (None: keep it)."""
        lo, hi = math.inf, -math.inf
        for curve in self.curves:
            y = curve.drawn[1]
            if len(y) and curve.item.isVisible():
                lo = min(lo, float(np.nanmin(y)))
                hi = max(hi, float(np.nanmax(y)))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        new = followed_range(
            self.view.viewRange()[1], lo, hi, self.y_fitted, margins=(0.08, 0.08)
        )
        if new is not None:
            self.y_fitted = True
        return new

    # ------------------------------------------------------------ legend
    def write_legend(self, runs: dict[str, dict[str, str]], x_axis: str) -> bool:
        """Name the curves with data under the plot (``runs``: each run's
        ``label`` and ``color``), or read out the values at :attr:`hover_x`;
        True when the text changed."""
        fg, dim = self.theme["fg"], self.theme["dim"]
        shown = [c for c in self.curves if len(c.values)]
        self.legend_curves = shown_curves(self)
        run_ids = list(dict.fromkeys(c.run_id for c in shown))
        keys = list(dict.fromkeys(c.key for c in shown))
        hover_x = self.hover_x
        parts = []
        if hover_x is not None:
            parts.append(
                f"<span style='color:{dim}'>{'step' if x_axis == 'step' else 'time'}"
                f"&nbsp;{format_x(x_axis, hover_x)}</span>"
            )
        if len(run_ids) > 1 and len(keys) > 1 and hover_x is None:
            # Compact: colors name the runs, line styles name the keys.
            for run_id in run_ids:
                info = runs[run_id]
                parts.append(
                    self._entry(
                        f"run:{run_id}",
                        f"<span style='color:{info['color']}'>■</span>&nbsp;"
                        f"<span style='color:{fg}'>{_html(info['label'])}</span>",
                    )
                )
            for key in keys:
                parts.append(
                    self._entry(
                        f"key:{key}",
                        f"<span style='color:{dim}'>{self.swatch(key)}&nbsp;"
                        f"{_html(key)}</span>",
                    )
                )
        else:
            for curve in shown:
                info = runs[curve.run_id]
                color = self.pen_of(curve.key, info["color"])[0]
                if len(keys) == 1:
                    name, series = info["label"], f"run:{curve.run_id}"
                elif len(run_ids) == 1:
                    name, series = curve.key, f"key:{curve.key}"
                else:
                    name = f"{info['label']} · {curve.key}"
                    series = f"curve:{curve.run_id} {curve.key}"
                swatch = "━━" if self.one_run() else self.swatch(curve.key)
                text = (
                    f"<span style='color:{color}'>{swatch}"
                    f"</span>&nbsp;<span style='color:{fg}'>{_html(name)}</span>"
                )
                near = curve.nearest(hover_x, x_axis) if hover_x is not None else None
                if near is not None:
                    text += (
                        f"&nbsp;<b style='color:{fg}'>{near[1]:.4g}</b>"
                        f"<span style='color:{dim}'>&nbsp;@&nbsp;"
                        f"{format_x(x_axis, near[0])}</span>"
                    )
                parts.append(self._entry(series, text))
        text = "&nbsp;&nbsp;&nbsp; ".join(parts)
        if text == self.legend.text():
            return False
        self.legend.setText(text)
        self.legend.keep_height()
        return True

    def line_style(self, key: str) -> QtCore.Qt.PenStyle:
        """The line style of a key's curves: by the key's place in the group."""
        return LINE_STYLES[self.keys.index(key) % len(LINE_STYLES)]

    def one_run(self) -> bool:
        """Whether the plot shows one run's curves: its series then differ by
        colour; several runs differ by colour, their series by line style."""
        return len({c.run_id for c in self.curves}) <= 1

    def pen_of(self, key: str, run_color: str) -> tuple[str, QtCore.Qt.PenStyle]:
        """The colour and line style of a curve of ``key``: a colour per
        series when the plot shows one run, else the run's colour and the
        key's line style."""
        if self.one_run():
            colors = SERIES_COLORS
            return colors[
                self.keys.index(key) % len(colors)
            ], QtCore.Qt.PenStyle.SolidLine
        return run_color, self.line_style(key)

    def swatch(self, key: str) -> str:
        """The key's line style in text, for the legend."""
        return ("━━", "╍╍", "┅┅", "━╍")[self.keys.index(key) % len(LINE_STYLES)]


def shown_curves(group: PlotGroup) -> tuple[tuple[str, str], ...]:
    """The curves of a group that have data, as ``(run_id, key)``."""
    return tuple((c.run_id, c.key) for c in group.curves if len(c.values))


def _html(text: str) -> str:
    """Escape for Qt rich text; keep a key on one line (no break after '/')."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace(" ", "&nbsp;").replace("/", "/\u2060")
