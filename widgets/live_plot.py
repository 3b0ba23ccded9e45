"""Live metric plots: grouped pyqtgraph plots that stay fast with millions of points.

:class:`LivePlotPanel` shows metric series of one or more runs in a grid of
plots grouped by rules (Rewards, Episode length, Losses, ...). It knows nothing
of where the data lives: the host gives it a *source* callable
``source(run_id, key) -> (steps, times, values)`` (for example
``MetricStore.series``) or pushes arrays with :meth:`LivePlotPanel.set_curve`,
and calls :meth:`LivePlotPanel.mark_dirty` when a series grew.

Redraws happen on the panel's own timer (25 Hz) and only for dirty curves, with
one ``setData`` each. Series are assumed append-only between redraws; a
curve costs O(pixels) a redraw, not O(points) (``widgets.plot_series``).
Each plot, with its axes, legend and followed view, is a ``PlotGroup``
(``widgets.plot_group``), laid out in a ``PlotGrid`` (``widgets.plot_grid``);
the CSV export is ``widgets.plot_export``'s. This module holds what a host
uses: the panel, its vocabulary and the grouping of keys.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import shiboken6
from PySide6 import QtCore, QtGui, QtWidgets

from widgets.plot_export import ask_export_path, save_png, write_csv
from widgets.plot_grid import PlotGrid
from widgets.plot_group import THEMES, X_AXIS_TITLES, PlotGroup, shown_curves
from widgets.plot_series import Curve, Line, Source, ema_smooth
from widgets.plot_toolbar import X_AXES, PlotToolbar

__all__ = [
    "OTHER_GROUP",
    "RUN_COLORS",
    "LivePlotPanel",
    "PlotVocabulary",
    "ema_smooth",
    "group_for_key",
    "metric_name",
]

GroupRules = Sequence[tuple[str, Sequence[str]]]


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
    x_titles: dict[str, str] = field(default_factory=dict)
    """The x axis title of a group whose steps are not training steps (a
    language-model collection logs once an episode: ``episodes``)."""
    integers: Sequence[str] = ()
    """Groups whose values are whole numbers: their y axis ticks on integers."""

    def titles(self, group: str) -> tuple[str, str]:
        """(y axis title, x axis title when x is the step) of ``group``."""
        return self.axes.get(group, ""), self.x_titles.get(group, X_AXIS_TITLES["step"])


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


def free_color(used: list[str]) -> str:
    """The first run colour not in ``used`` (all taken: they repeat)."""
    free = [c for c in RUN_COLORS if c not in used]
    return free[0] if free else RUN_COLORS[len(used) % len(RUN_COLORS)]


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


# ------------------------------------------------------------------ the panel


def plain_text(html: str) -> str:
    """A legend's rich text as plain text (word joiners and no-break spaces
    as the reader would see them)."""
    doc = QtGui.QTextDocument()
    doc.setHtml(html)
    return doc.toPlainText().replace("\u2060", "").replace("\xa0", " ")


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
        if theme not in THEMES:
            raise ValueError(f"theme must be one of {sorted(THEMES)}, not {theme!r}.")
        vocabulary = vocabulary or PlotVocabulary()
        self._rules: list[tuple[str, tuple[str, ...]]] = [
            (t, tuple(p)) for t, p in vocabulary.groups
        ]
        self._ignored = tuple(vocabulary.ignored)
        self._vocabulary = vocabulary
        self._theme = THEMES[theme]
        self._theme_name = theme
        self._columns = columns
        self._source: Source | None = None
        self._groups: dict[str, PlotGroup] = {}
        self._curves: dict[tuple[str, str], Curve[PlotGroup]] = {}
        # Curves of removed runs, hidden, for a run shown again (see
        # remove_run); the runs in the order they were removed.
        self._parked: dict[tuple[str, str], Curve[PlotGroup]] = {}
        self._parked_runs: dict[str, None] = {}
        self._runs: dict[str, dict[str, str]] = {}  # run_id -> {label, color}
        self._dirty: dict[Curve[PlotGroup], None] = {}  # ordered set
        # Curves brought up to date while the panel was hidden in a shown
        # window (another workspace or tab): drawn when it shows again.
        self._undrawn: dict[Curve[PlotGroup], None] = {}  # ordered set
        # Groups whose legend is rewritten at the end of the redraw tick: a
        # selection of runs changes a legend once per curve, and each rewrite
        # lays out its rich text (1 to 2 ms).
        self._stale_legends: dict[PlotGroup, None] = {}  # ordered set
        self._rewritten_legends: dict[PlotGroup, None] = {}  # since the last layout
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
        self._toolbar = PlotToolbar()
        self._toolbar.smoothing_edited.connect(self.set_smoothing)
        self._toolbar.x_axis_edited.connect(self.set_x_axis)
        self._toolbar.export_requested.connect(self.export_requested)
        self._scroll = PlotGrid()

        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self._toolbar)
        lay.addWidget(self._scroll, 1)
        self._apply_grid_theme()

    def _apply_grid_theme(self) -> None:
        self._scroll.apply_theme(self._theme)

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
            color = color or free_color([r["color"] for r in self._runs.values()])
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
                self._wake()

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
        groups: dict[PlotGroup, None] = {}
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
        self._runs.pop(run_id, None)
        for group in groups:
            if group.one_run():  # one run left: its series take their colours
                for other in group.curves:
                    self._style(other)
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
        for group in self._groups.values():
            if group.follow_x or group.follow_y:
                group.x_fitted = group.y_fitted = False
                self._on_view_changed(group)
        # Which plots show is settled on the next redraw tick: a host that
        # swaps runs (remove one, add another) must not hide every plot and
        # lay the grid out twice in between.
        self._wake()

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
        self._toolbar.show_smoothing(weight)
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
        self._toolbar.show_x_axis(mode)
        for group in self._groups.values():
            group.set_x_mode(mode, *self._vocabulary.titles(group.title))
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
        if theme not in THEMES:
            raise ValueError(f"theme must be one of {sorted(THEMES)}, not {theme!r}.")
        self._theme_name, self._theme = theme, THEMES[theme]
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
        return plain_text(self._groups[title].legend.text())

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
        """Curves waiting to be built or drawn, and legends to be rewritten."""
        return len(self._dirty) + len(self._pending) + len(self._stale_legends)

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
        deferred = not (unbounded or self.isVisible()) and self.window().isVisible()
        drawn = 0
        touched: dict[PlotGroup, None] = {}
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
            group.follow(self._x_axis)
            if group.hover_x is not None:  # the readout, once per plot
                self._set_hover(group, group.hover_x)
            if shown_curves(group) != group.legend_curves:
                self._queue_legend(group)
        self._update_visibility()
        self._flush_legends(t0 + self.redraw_budget_s)
        if not self.pending_redraws():
            self._timer.stop()
        self.last_redraw_s = time.perf_counter() - t0
        return drawn

    def redraw_all(self) -> None:
        """Draw every dirty curve now, ignoring budgets (tests, export)."""
        budget = self.redraw_budget_s
        self.redraw_budget_s = math.inf
        self._redraw_undrawn()
        try:
            while self.pending_redraws():
                self.redraw_dirty()
        finally:
            self.redraw_budget_s = budget

    def _refresh(
        self, curve: Curve[PlotGroup], limit: int | None, draw: bool = True
    ) -> bool:
        """Bring a curve's display up to date and draw it (unless ``draw`` is
        False); False if unfinished."""
        if not curve.refresh(self._source, self._smoothing, limit):
            return False
        if draw:
            curve.draw(self._x_axis, self._style)
        return True

    def _redraw_undrawn(self) -> None:
        """Queue the curves left undrawn while the panel was hidden."""
        for curve in self._undrawn:
            if self._curves.get((curve.run_id, curve.key)) is curve:
                self._dirty[curve] = None
        self._undrawn.clear()
        if self._dirty:
            self._wake()

    # ------------------------------------------------------------ hover
    def hover_text(self, title: str, x: float) -> str:
        """Plain text of the readout for the point nearest ``x`` on each curve."""
        self._set_hover(self._groups[title], x)
        return self.legend_text(title)

    def _set_hover(self, group: PlotGroup, x: float | None) -> None:
        group.set_hover(x)
        self._update_legend(group)
        self._settle_grid()

    # ------------------------------------------------------------ export
    def export_png(self, path: str | Path, group: str | None = None) -> Path:
        """Save the visible plots (or one group) as a PNG image."""
        self.redraw_all()
        return save_png(
            self._scroll.host if group is None else self._groups[group], path
        )

    def export_csv(self, path: str | Path, *, visible_range_only: bool = False) -> int:
        """Write the curves of visible groups as CSV (``run, key, step, time,
        value``, and ``smoothed`` when smoothing is on; with
        ``visible_range_only`` the points in each plot's x range); the rows."""
        self.redraw_all()
        return write_csv(
            path,
            [self._groups[title] for title in self._visible],
            {run_id: info["label"] for run_id, info in self._runs.items()},
            x_axis=self._x_axis,
            smoothed=self._smoothing > 0,
            visible_range_only=visible_range_only,
        )

    def choose_and_export(self, kind: str) -> Path | None:
        """Ask for a file name with a dialog and export (``"png"`` or ``"csv"``)."""
        if not (name := ask_export_path(self, kind)):
            return None
        if kind == "png":
            return self.export_png(name)
        self.export_csv(name)
        return Path(name)

    # ------------------------------------------------------------ internals
    def _ordered_titles(self) -> list[str]:
        return [t for t, _ in self._rules] + [OTHER_GROUP]

    def _wake(self) -> None:
        """Run the redraw timer (until nothing is left to draw)."""
        if not self._timer.isActive():
            self._timer.start()

    def _run_curves(self, run_id: str) -> list[Curve[PlotGroup]]:
        return [c for (r, _), c in self._curves.items() if r == run_id]

    def _mark(self, curve: Curve[PlotGroup], reset: bool = False) -> None:
        curve.needs_fetch = True
        if reset:
            curve.needs_reset = True
            curve.last_request = None
        self._dirty[curve] = None
        self._wake()

    def _curve(self, run_id: str, key: str, create: bool) -> Curve[PlotGroup] | None:
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
            item = Line()
            group.plot.getPlotItem().addItem(item)
            curve = Curve(run_id=run_id, key=key, group=group, item=item)
        patterns = next((pats for t, pats in self._rules if t == title), ())
        restyle = group.add_curve(
            curve, list(self._runs), lambda k: key_rank(patterns, k)
        )
        self._curves[(run_id, key)] = curve
        group.show_if_wanted(curve)  # a series clicked off in the legend stays so
        for other in group.curves if restyle else [curve]:
            self._style(other)
        self._queue_legend(group)
        return curve

    def _group(self, title: str) -> PlotGroup:
        group = self._groups.get(title)
        if group is None:
            integer = title in self._vocabulary.integers
            group = self._groups[title] = PlotGroup(title, self._theme, integer)
            group.set_x_mode(self._x_axis, *self._vocabulary.titles(title))
            group.hide()
            group.hovered.connect(lambda x, g=group: self._set_hover(g, x))
            group.view_changed.connect(lambda g=group: self._on_view_changed(g))
            group.reset_requested.connect(lambda g=group: self.reset_view(g.title))
            group.series_toggled.connect(
                lambda _series, _shown, g=group: self._on_group_series_toggled(g)
            )
        return group

    def _on_group_series_toggled(self, group: PlotGroup) -> None:
        self._queue_legend(group)  # the entry struck through, or not
        self._on_view_changed(group)  # y follows the curves still shown

    def _on_view_changed(self, group: PlotGroup) -> None:
        if not shiboken6.isValid(self._timer):
            return  # the panel is being destroyed (its views resize on the way)
        for curve in group.curves:
            self._dirty[curve] = None
        if group.curves:
            self._wake()

    def _style(self, curve: Curve[PlotGroup]) -> None:
        color, style = curve.group.pen_of(curve.key, self._runs[curve.run_id]["color"])
        width = 2 if curve.wide else 1
        if curve.style == (color, width, style):
            return  # a new pen re-sets the item's data (a run shown again)
        curve.style = (color, width, style)
        curve.item.setPen(pg.mkPen(color, width=width, style=style))
        if curve.key.startswith("eval/"):
            curve.item.setSymbols(5, pg.mkBrush(color))

    def _queue_legend(self, group: PlotGroup) -> None:
        """Rewrite a legend at the end of the redraw tick (or when read)."""
        self._stale_legends[group] = None
        self._wake()

    def _flush_legends(self, deadline: float = math.inf) -> None:
        """Rewrite the stale legends, at least one, until ``deadline`` (a
        ``time.perf_counter()``); the rest wait for the next redraw tick (a
        new selection's legends took 8-14 ms beyond the curves' budget)."""
        while self._stale_legends:
            self._update_legend(next(iter(self._stale_legends)))
            if time.perf_counter() > deadline:
                break
        self._settle_grid()

    def _settle_grid(self) -> None:
        """Lay the grid out now for legends that were rewritten."""
        groups, self._rewritten_legends = self._rewritten_legends, {}
        self._scroll.settle(list(groups))

    def _update_legend(self, group: PlotGroup) -> None:
        self._stale_legends.pop(group, None)
        if group.write_legend(self._runs, self._x_axis):
            self._rewritten_legends[group] = None

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
        return self._columns or columns_for_width(self.width())

    def _relayout(self) -> None:
        self._scroll.lay_out(
            [self._groups[title] for title in self._visible],
            [g for title, g in self._groups.items() if title not in self._visible],
            self._column_count(),
        )

    def showEvent(self, event: QtGui.QShowEvent) -> None:
        super().showEvent(event)
        self._redraw_undrawn()

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._visible and self._scroll.cols != self._column_count():
            self._relayout()


def columns_for_width(width: int) -> int:
    """How many columns of plots a panel ``width`` pixels wide shows."""
    return 1 if width < 700 else (2 if width < 1500 else 3)


def key_rank(patterns: Sequence[str], key: str) -> int:
    """Position of the first of a group's rule ``patterns`` that ``key``
    matches; keys no rule lists (the Other group) keep arrival order."""
    for i, pattern in enumerate(patterns):
        if key == pattern or fnmatch.fnmatchcase(key, pattern):
            return i
    return len(patterns)
