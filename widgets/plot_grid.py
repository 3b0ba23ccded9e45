"""The scrollable grid a live plot panel lays its plots out in. Used by
``widgets.live_plot``."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets


class FittedGridLayout(QtWidgets.QGridLayout):
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


class PlotGrid(QtWidgets.QScrollArea):
    """The plots shown, in rows of ``cols`` columns, or a line saying there
    are none yet."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = QtWidgets.QWidget()
        self.host.setObjectName("livePlotGrid")
        self._layout = FittedGridLayout(self.host)
        self._layout.setContentsMargins(4, 4, 4, 4)
        self._layout.setSpacing(6)
        self.empty = QtWidgets.QLabel("No metrics yet")
        self.empty.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
        self._layout.addWidget(self.empty, 0, 0)
        self.cols = 0
        """The columns the plots were last laid out in (0: never)."""
        self.setWidgetResizable(True)
        # The scroll bar's room is always kept: one appearing once the plots
        # outgrow the view (the first show, a run's plots added) narrowed
        # them after they were laid out, so every plot was resized and
        # re-laid out its axes twice in the same turn of the event loop.
        self.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        self.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self.setWidget(self.host)

    def apply_theme(self, theme: dict[str, str]) -> None:
        self.host.setStyleSheet(f"#livePlotGrid {{ background: {theme['grid']}; }}")
        self.empty.setStyleSheet(f"color: {theme['dim']};")

    def lay_out(
        self,
        shown: list[QtWidgets.QWidget],
        hidden: list[QtWidgets.QWidget],
        cols: int,
    ) -> None:
        """Show ``shown`` in this order, ``cols`` a row, and hide ``hidden``."""
        for widget in (*shown, *hidden, self.empty):
            self._layout.removeWidget(widget)
        for c in range(4):
            self._layout.setColumnStretch(c, 0)
        for i, widget in enumerate(shown):
            self._layout.addWidget(widget, i // cols, i % cols)
            widget.show()
        for widget in hidden:
            widget.hide()
        for c in range(min(cols, max(1, len(shown)))):
            self._layout.setColumnStretch(c, 1)
        self.empty.setVisible(not shown)
        if not shown:
            self._layout.addWidget(self.empty, 0, 0)
        self.cols = cols

    def settle(self, grown: list[QtWidgets.QWidget]) -> None:
        """Lay the grid out now for plots whose legend was rewritten.

        Left to Qt, a plot whose legend needs another line is laid out
        first in its old height (the plot shrinks), and only then does the
        grid give it the taller height (the plot grows back): two resizes
        of the plot, each re-laying out its axes. The grid laid out first
        gives the plot its room in one step."""
        if not grown or not self.host.isVisible():
            return
        for widget in grown:
            widget.updateGeometry()
        self._layout.activate()
