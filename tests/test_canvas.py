"""The canvas base both graph editors share (widgets.canvas): clamped zoom
about a fixed point, pan, fit, and the wheel, middle-button and Space
gestures chosen by class attributes."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QKeyEvent, QMouseEvent, QWheelEvent
from PySide6.QtWidgets import QApplication, QGraphicsScene

from widgets.canvas import WHEEL_STEP, CanvasView, PanGesture


class PanningCanvas(CanvasView):
    """A canvas as the flow editor configures it: clamped zoom, the plain
    wheel zooms, Space or the middle button pans."""

    min_zoom, max_zoom = 0.25, 2.0
    space_pans = True

    def __init__(self) -> None:
        super().__init__()
        scene = QGraphicsScene(self)
        scene.setSceneRect(-5000, -5000, 10000, 10000)
        scene.addRect(QRectF(0, 0, 100, 60))
        scene.addRect(QRectF(400, 300, 100, 60))
        self.setScene(scene)
        self.setTransformationAnchor(CanvasView.ViewportAnchor.NoAnchor)
        self.resize(400, 300)
        self.pan = PanGesture(self)
        self.zoomed_by_user = 0

    def user_zoomed(self) -> None:
        self.zoomed_by_user += 1

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if not self.pan.press(event):
            super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        self.pan.move(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        self.pan.release(event)


class CtrlWheelCanvas(PanningCanvas):
    """A canvas as the env designer configures it: only Ctrl+wheel zooms."""

    wheel_zoom_modifier = Qt.KeyboardModifier.ControlModifier
    space_pans = False


def wheel(view: CanvasView, at: QPointF, notches: float, mods=None) -> None:
    event = QWheelEvent(
        at,
        QPointF(view.viewport().mapToGlobal(at.toPoint())),
        QPoint(),
        QPoint(0, round(120 * notches)),
        Qt.MouseButton.NoButton,
        mods or Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(view.viewport(), event)


def key(view: CanvasView, kind: QEvent.Type, k: Qt.Key) -> None:
    QApplication.sendEvent(view, QKeyEvent(kind, k, Qt.KeyboardModifier.NoModifier))


def test_zoom_is_clamped_and_keeps_the_anchor_point_still(qtbot) -> None:
    view = PanningCanvas()
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    anchor = QPointF(80, 50)
    before = view.mapToScene(anchor.toPoint())
    view.set_zoom(1.5, anchor)
    assert abs(view.zoom() - 1.5) < 1e-9
    after = view.mapToScene(anchor.toPoint())
    assert abs(after.x() - before.x()) < 1.5 and abs(after.y() - before.y()) < 1.5
    view.set_zoom(100)
    assert view.zoom() == 2.0
    view.set_zoom(0.001)
    assert view.zoom() == 0.25


def test_pan_by_moves_the_content_with_the_drag(qtbot) -> None:
    view = PanningCanvas()
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    before = view.mapFromScene(QPointF(0, 0))
    view.pan_by(30, -20)
    after = view.mapFromScene(QPointF(0, 0))
    assert (after - before) == QPoint(30, -20)


def test_fit_shows_the_rect_centred_within_the_zoom_limits(qtbot) -> None:
    view = PanningCanvas()
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    wide = QRectF(-1000, -1000, 3000, 2000)
    view.fit_rect(wide, 1.0)
    assert (
        abs(view.zoom() - 0.25) < 1e-9
    )  # the whole rect would need less: min_zoom holds
    small = QRectF(0, 0, 50, 30)
    view.fit_rect(small, 1.0)
    assert abs(view.zoom() - 1.0) < 1e-9  # never zoomed in past the cap
    centre = view.mapToScene(view.viewport().rect().center())
    assert abs(centre.x() - 25) < 2 and abs(centre.y() - 15) < 2
    both = QRectF(0, 0, 500, 360)
    view.fit_rect(both, 1.0)
    visible = view.mapToScene(view.viewport().rect()).boundingRect()
    assert visible.adjusted(-1, -1, 1, 1).contains(both)


def test_the_plain_wheel_zooms_about_the_mouse_when_no_modifier_is_set(
    qtbot,
) -> None:
    view = PanningCanvas()
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    at = QPointF(120, 90)
    before = view.mapToScene(at.toPoint())
    wheel(view, at, 2)
    assert abs(view.zoom() - WHEEL_STEP**2) < 1e-9
    after = view.mapToScene(at.toPoint())
    assert abs(after.x() - before.x()) < 1.5 and abs(after.y() - before.y()) < 1.5
    assert view.zoomed_by_user == 1
    wheel(view, at, 0)  # a horizontal-only scroll: no zoom
    assert abs(view.zoom() - WHEEL_STEP**2) < 1e-9
    assert view.zoomed_by_user == 1


def test_with_a_modifier_only_that_wheel_zooms(qtbot) -> None:
    view = CtrlWheelCanvas()
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    wheel(view, QPointF(100, 100), 1)
    assert view.zoom() == 1.0 and view.zoomed_by_user == 0
    wheel(view, QPointF(100, 100), -1, Qt.KeyboardModifier.ControlModifier)
    assert abs(view.zoom() - 1 / WHEEL_STEP) < 1e-9
    assert view.zoomed_by_user == 1


def test_middle_drag_and_space_drag_pan_only_where_enabled(qtbot) -> None:
    view = PanningCanvas()
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    port = view.viewport()
    origin = view.mapFromScene(QPointF(0, 0))
    qtbot.mousePress(port, Qt.MouseButton.MiddleButton, pos=QPoint(100, 100))
    qtbot.mouseMove(port, QPoint(140, 110))
    qtbot.mouseRelease(port, Qt.MouseButton.MiddleButton, pos=QPoint(140, 110))
    assert view.mapFromScene(QPointF(0, 0)) - origin == QPoint(40, 10)

    key(view, QEvent.Type.KeyPress, Qt.Key.Key_Space)
    assert view.space_held
    assert port.cursor().shape() == Qt.CursorShape.OpenHandCursor
    origin = view.mapFromScene(QPointF(0, 0))
    qtbot.mousePress(port, Qt.MouseButton.LeftButton, pos=QPoint(100, 100))
    qtbot.mouseMove(port, QPoint(90, 130))
    qtbot.mouseRelease(port, Qt.MouseButton.LeftButton, pos=QPoint(90, 130))
    assert view.mapFromScene(QPointF(0, 0)) - origin == QPoint(-10, 30)
    key(view, QEvent.Type.KeyRelease, Qt.Key.Key_Space)
    assert not view.space_held
    assert port.cursor().shape() == Qt.CursorShape.ArrowCursor

    # Without space_pans, Space is an ordinary key and a left drag no pan.
    other = CtrlWheelCanvas()
    qtbot.addWidget(other)
    other.show()
    qtbot.waitExposed(other)
    key(other, QEvent.Type.KeyPress, Qt.Key.Key_Space)
    assert not other.space_held
    assert not other.pan.press(
        QMouseEvent(
            QEvent.Type.MouseButtonPress,
            QPointF(10, 10),
            QPointF(10, 10),
            Qt.MouseButton.LeftButton,
            Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier,
        )
    )
