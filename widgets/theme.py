"""Light and dark: the palettes, and widgets that draw their own colours
(plots, canvases) following the palette they are shown with."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory, QWidget

if TYPE_CHECKING:
    import pyqtgraph as pg

CANVAS = {
    # background, fine grid, coarse grid
    "light": ("#eef0f3", "#e0e3e8", "#d0d4db"),
    "dark": ("#1e2126", "#2a2e35", "#363b44"),
}
PLOT = {
    # background, text and axes, title
    "light": ("#ffffff", "#4a4f57", "#333333"),
    "dark": ("#1b1d21", "#c9ccd1", "#e3e5e8"),
}


def is_dark(palette: QPalette | None = None) -> bool:
    """Whether ``palette`` (the application's by default) is a dark one."""
    palette = palette or QApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def theme_name(palette: QPalette | None = None) -> str:
    return "dark" if is_dark(palette) else "light"


def dark_palette() -> QPalette:
    p = QPalette()
    roles = QPalette.ColorRole
    for role, color in (
        (roles.Window, "#26292e"),
        (roles.WindowText, "#dfe1e5"),
        (roles.Base, "#1d1f23"),
        (roles.AlternateBase, "#2a2d33"),
        (roles.ToolTipBase, "#33373e"),
        (roles.ToolTipText, "#dfe1e5"),
        (roles.PlaceholderText, "#7d828b"),
        (roles.Text, "#dfe1e5"),
        (roles.Button, "#2f3238"),
        (roles.ButtonText, "#dfe1e5"),
        (roles.BrightText, "#ff6b6b"),
        (roles.Light, "#3b3f46"),
        (roles.Midlight, "#34373d"),
        (roles.Mid, "#8a8f98"),
        (roles.Dark, "#151719"),
        (roles.Shadow, "#0c0d0f"),
        (roles.Highlight, "#3d7bd9"),
        (roles.HighlightedText, "#ffffff"),
        (roles.Link, "#6aa6f8"),
    ):
        p.setColor(role, QColor(color))
    disabled = QPalette.ColorGroup.Disabled
    for role in (roles.WindowText, roles.Text, roles.ButtonText):
        p.setColor(disabled, role, QColor("#6b7079"))
    return p


def apply_palette(app: QApplication, dark: bool) -> None:
    """Fusion with a dark or a light palette (Fusion draws both alike on
    every platform; native styles ignore part of a dark palette)."""
    style = QStyleFactory.create("Fusion")
    app.setStyle(style)
    app.setPalette(dark_palette() if dark else style.standardPalette())


WATCHED = (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange)


class _PaletteWatch(QObject):
    def __init__(self, widget: QWidget, apply: Callable[[bool], None]) -> None:
        super().__init__(widget)
        self._widget = widget
        self._apply = apply
        widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # A widget with a style sheet of its own hears of an application
        # palette change only as ApplicationPaletteChange.
        if event.type() in WATCHED and watched is self._widget:
            self._apply(is_dark(self._widget.palette()))
        return False


def follow_palette(
    widget: QWidget, apply: Callable[[bool], None], *, now: bool = True
) -> None:
    """Call ``apply(dark)`` whenever ``widget``'s palette changes (and now,
    unless ``now`` is false)."""
    _PaletteWatch(widget, apply)
    if now:
        apply(is_dark(widget.palette()))


def style_plot(plot: pg.PlotWidget, dark: bool, title: str = "") -> None:
    """A pyqtgraph plot's background, axes and title in the theme's colours."""
    import pyqtgraph as pg  # here: the theme is applied at launch, plots come later

    background, foreground, title_color = PLOT["dark" if dark else "light"]
    plot.setBackground(background)
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        axis.setPen(pg.mkPen(foreground))
        axis.setTextPen(pg.mkPen(foreground))
    if title:
        plot.setTitle(title, color=title_color, size="10pt")
