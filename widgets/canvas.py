"""The canvas both graph editors are built on: a ``QGraphicsView`` that zooms
(clamped, about a fixed point), pans, fits a rectangle and reads the wheel,
middle-button and Space gestures the same way everywhere.

:class:`widgets.node_graph.NodeGraphView` (the flow editor) and
:class:`widgets.state_machine_editor.StateMachineEditor` (the env designer)
subclass :class:`CanvasView`; the class attributes choose the gestures each
one offers."""

from __future__ import annotations

import math

from PySide6.QtCore import QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QKeyEvent, QMouseEvent, QWheelEvent
from PySide6.QtWidgets import QGraphicsView, QWidget

WHEEL_STEP = 1.15
"""Zoom factor of one wheel notch (120 eighths of a degree)."""


class Gesture:
    """One mouse gesture on a canvas. ``press`` claims it (returns True) or
    lets the next gesture (and finally Qt's default handling) have it."""

    def __init__(self, view: CanvasView) -> None:
        self.view = view

    def press(self, event: QMouseEvent) -> bool:
        return False

    def move(self, event: QMouseEvent) -> None:
        pass

    def release(self, event: QMouseEvent) -> None:
        pass


class PanGesture(Gesture):
    """Middle-button drag, or left drag while Space is held, scrolls the view."""

    def __init__(self, view: CanvasView) -> None:
        super().__init__(view)
        self._last = QPoint()

    def press(self, event: QMouseEvent) -> bool:
        button = event.button()
        if button == Qt.MouseButton.MiddleButton or (
            button == Qt.MouseButton.LeftButton and self.view.space_held
        ):
            self._last = event.position().toPoint()
            self.view.viewport().setCursor(Qt.CursorShape.ClosedHandCursor)
            return True
        return False

    def move(self, event: QMouseEvent) -> None:
        pos = event.position().toPoint()
        delta = pos - self._last
        self._last = pos
        self.view.pan_by(delta.x(), delta.y())

    def release(self, event: QMouseEvent) -> None:
        self.view.viewport().setCursor(
            Qt.CursorShape.OpenHandCursor
            if self.view.space_held
            else Qt.CursorShape.ArrowCursor
        )


class CanvasView(QGraphicsView):
    """Zoom, pan and fit for a graph canvas.

    Class attributes a subclass sets:

    ``min_zoom`` / ``max_zoom``
        The zoom levels :meth:`set_zoom` and :meth:`fit_rect` keep within.
    ``wheel_zoom_modifier``
        ``None``: the plain wheel zooms. A modifier: only the wheel with it
        held zooms; without it the wheel scrolls as in any view.
    ``space_pans``
        Space held turns a left drag into a pan (see :class:`PanGesture`,
        which a subclass puts among its gestures).
    """

    min_zoom: float = 0.0
    max_zoom: float = math.inf
    wheel_zoom_modifier: Qt.KeyboardModifier | None = None
    space_pans: bool = False

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.space_held = False

    # ------------------------------------------------------------ zoom
    def zoom(self) -> float:
        return self.transform().m11()

    def set_zoom(self, factor: float, anchor: QPointF | None = None) -> None:
        """Zoom to ``factor`` (clamped) keeping the ``anchor`` view point fixed
        (the middle of the view when none is given)."""
        factor = max(self.min_zoom, min(self.max_zoom, factor))
        view_anchor = (
            anchor if anchor is not None else QPointF(self.viewport().rect().center())
        )
        before = self.mapToScene(view_anchor.toPoint())
        scale = factor / self.zoom()
        self.scale(scale, scale)
        after = self.mapToScene(view_anchor.toPoint())
        delta = after - before
        self.translate(delta.x(), delta.y())

    def user_zoomed(self) -> None:
        """Called after the user zoomed with the wheel; a subclass may stop
        fitting automatically from then on."""

    # ------------------------------------------------------------- pan
    def pan_by(self, dx: int, dy: int) -> None:
        """Move the content ``dx``, ``dy`` view pixels (as a drag would)."""
        h, v = self.horizontalScrollBar(), self.verticalScrollBar()
        h.setValue(h.value() - dx)
        v.setValue(v.value() - dy)

    # ------------------------------------------------------------- fit
    def fit_rect(self, rect: QRectF, max_zoom: float) -> None:
        """Show ``rect`` whole and centred, zoomed in no further than
        ``max_zoom`` and no further out than ``min_zoom``."""
        self.fitInView(rect, Qt.AspectRatioMode.KeepAspectRatio)
        clamped = max(self.min_zoom, min(max_zoom, self.zoom()))
        if clamped != self.zoom():
            self.set_zoom(clamped)
        self.centerOn(rect.center())

    # ---------------------------------------------------------- events
    def wheelEvent(self, event: QWheelEvent) -> None:
        modifier = self.wheel_zoom_modifier
        if modifier is not None and not event.modifiers() & modifier:
            super().wheelEvent(event)
            return
        steps = event.angleDelta().y() / 120.0
        if not steps:
            return
        self.set_zoom(self.zoom() * (WHEEL_STEP**steps), event.position())
        self.user_zoomed()
        event.accept()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if (
            self.space_pans
            and event.key() == Qt.Key.Key_Space
            and not event.isAutoRepeat()
        ):
            self.space_held = True
            self.viewport().setCursor(Qt.CursorShape.OpenHandCursor)
            event.accept()
            return
        super().keyPressEvent(event)

    def keyReleaseEvent(self, event: QKeyEvent) -> None:
        if (
            self.space_pans
            and event.key() == Qt.Key.Key_Space
            and not event.isAutoRepeat()
        ):
            self.space_held = False
            self.viewport().setCursor(Qt.CursorShape.ArrowCursor)
            event.accept()
            return
        super().keyReleaseEvent(event)


__all__ = ["WHEEL_STEP", "CanvasView", "Gesture", "PanGesture"]
