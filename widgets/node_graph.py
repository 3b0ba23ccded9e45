"""A node-graph canvas: titled nodes with typed ports, bezier links, zoom,
pan, grid snapping, rubber-band selection and run-state badges.

The canvas is a *view*: it knows nothing of what nodes mean. The host keeps
the model and syncs the canvas with :meth:`NodeGraphView.add_node`,
:meth:`~NodeGraphView.add_link` and friends; user gestures come back as
``*_requested`` signals that the host may honour (by updating its model and
the canvas) or refuse (:meth:`~NodeGraphView.show_link_refused`).

Mouse gestures are small :class:`Interaction` objects (pan, link drag, move
tracking) rather than branches of ``mousePressEvent``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QLineF, QPoint, QPointF, QRect, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QFont,
    QFontMetricsF,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPainterPathStroker,
    QPen,
    QTransform,
)
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsObject,
    QGraphicsPathItem,
    QGraphicsScene,
    QGraphicsSceneHoverEvent,
    QGraphicsView,
    QLabel,
    QStyleOptionGraphicsItem,
    QWidget,
)

from widgets.canvas import CanvasView, Gesture, PanGesture
from widgets.theme import CANVAS, theme_name

NODE_TYPE_MIME = "application/x-rlstudio-node-type"
"""MIME type of a drag carrying a node type name (UTF-8) onto the canvas."""
NODE_PARAMS_MIME = "application/x-rlstudio-node-params"
"""With :data:`NODE_TYPE_MIME`: parameters for the node, a JSON object
(an environment dragged from a list: ``{"env": "CartPole-v1"}``)."""

NODE_WIDTH = 190.0
HEADER_HEIGHT = 26.0
PORT_ROW = 22.0
PORT_RADIUS = 6.0
GRID = 20.0
MIN_ZOOM, MAX_ZOOM = 0.15, 3.0
LOD_DETAIL = 0.5
"""Below this zoom, links and the grid draw without antialiasing and the
grid coarsens: a whole 500-node graph stays quick to pan."""
LOD_NODE_DETAIL = 0.7
"""Below this zoom a node paints its overview (:meth:`NodeItem.paint_overview`):
its box and a title in a font sized for the screen. Its detailed header
font would be under 9 px on screen there, its port names smaller still."""
OVERVIEW_TITLE_PX = (11, 10, 9)
"""On-screen pixel sizes of an overview title, tried in turn until the
wrapped title fits its node; at the last it is elided (the node's tooltip
has it whole). Device-independent pixels: 200 % scaling draws the same
text twice as sharp, not smaller."""
SCENE_EXTENT = 100_000.0

STATE_COLORS: dict[str, str] = {
    "queued": "#8f9bb3",
    "running": "#4c9be8",
    "done": "#59b36b",
    "cached": "#59b36b",
    "failed": "#e15759",
    "skipped": "#a0a0a0",
    "stopped": "#d4b22c",
}
"""Badge color per node state."""

_FALLBACK_PORT_COLORS = (
    "#4c9be8",
    "#e68a3a",
    "#59b36b",
    "#b07aa1",
    "#e15759",
    "#3fb5b0",
    "#d4b22c",
    "#9c755f",
    "#ff9da7",
)

LinkKey = tuple[str, str, str, str]
"""``(from_node, from_port, to_node, to_port)``."""
TITLE_POINTS = (9.5, 8.5, 7.5)
"""Title font sizes, tried in turn until the title fits its header."""


def fit_title(title: str, font: QFont, width: float) -> str:
    """Set ``font`` to the largest of :data:`TITLE_POINTS` at which ``title``
    fits ``width``; the title, elided only if even the smallest is too wide."""
    for points in TITLE_POINTS:
        font.setPointSizeF(points)
        if QFontMetricsF(font).horizontalAdvance(title) <= width:
            return title
    return QFontMetricsF(font).elidedText(title, Qt.TextElideMode.ElideRight, width)


def wrap_title(title: str, font: QFont, width: float, height: float) -> list[str]:
    """``title`` word-wrapped into lines no wider than ``width`` in ``font``,
    as many as ``height`` holds (at least one); a word too wide for a line,
    and the last line when words are left over, end in an ellipsis."""
    metrics = QFontMetricsF(font)
    room = max(1, int(height // metrics.lineSpacing()))
    elide = Qt.TextElideMode.ElideRight
    lines: list[str] = []
    words = title.split()
    while words and len(lines) < room:
        line = words.pop(0)
        while words and metrics.horizontalAdvance(f"{line} {words[0]}") <= width:
            line += " " + words.pop(0)
        if words and len(lines) == room - 1:
            line = " ".join([line, *words])
            words = []
        lines.append(metrics.elidedText(line, elide, width))
    return lines


@functools.lru_cache(maxsize=4096)
def overview_lines(title: str, width: int, height: int) -> tuple[int, tuple[str, ...]]:
    """The largest of :data:`OVERVIEW_TITLE_PX` at which ``title`` wraps
    whole into ``width`` x ``height`` screen pixels, and its lines; else the
    smallest and the lines elided. Cached: a zoomed graph has few distinct
    titles and node sizes, and its every node repaints at each zoom step
    (the application font, which the lines are measured in, never changes
    while the studio runs)."""
    font = QFont()
    lines: list[str] = []
    for px in OVERVIEW_TITLE_PX:
        font.setPixelSize(px)
        lines = wrap_title(title, font, width, height)
        if " ".join(lines) == " ".join(title.split()):
            break
    return px, tuple(lines)


@dataclass(frozen=True)
class Port:
    """A port as the host describes it."""

    name: str
    type: str
    help: str = ""
    required: bool = False


def _as_port(value: Port | tuple[str, str] | str) -> Port:
    if isinstance(value, Port):
        return value
    if isinstance(value, str):
        return Port(value, "")
    return Port(*value)


# --------------------------------------------------------------------------
# Items
# --------------------------------------------------------------------------


class PortItem(QGraphicsItem):
    """A port circle on the edge of a node; child of its :class:`NodeItem`."""

    def __init__(self, node: NodeItem, port: Port, output: bool) -> None:
        super().__init__(node)
        self.node = node
        self.port = port
        self.output = output
        self.links: list[LinkItem] = []
        self.hovered = False
        self.dimmed = False
        self.setAcceptHoverEvents(True)
        self.setCursor(Qt.CursorShape.CrossCursor)
        tip = f"{port.name} ({port.type or 'unknown type'})"
        if port.help:
            tip += f"\n{port.help}"
        self.setToolTip(tip)
        self.setZValue(2)

    @property
    def color(self) -> QColor:
        return self.node.canvas_colors.port_color(self.port.type)

    def boundingRect(self) -> QRectF:
        r = PORT_RADIUS + 3
        return QRectF(-r, -r, 2 * r, 2 * r)

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionGraphicsItem,
        widget: QWidget | None = None,
    ) -> None:
        color = QColor(self.color)
        if self.dimmed:
            color.setAlpha(60)
        r = PORT_RADIUS + (2 if self.hovered else 0)
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        if lod < LOD_NODE_DETAIL:
            return  # the node's overview paints its ports (in its cache)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(QColor("#20242b"), 1.5))
        filled = self.links or self.output or not self.port.required
        painter.setBrush(QBrush(color) if filled else QBrush(QColor("#f4f5f7")))
        if not filled:
            painter.setPen(QPen(color, 2.5))
        painter.drawEllipse(QPointF(0, 0), r, r)

    def center(self) -> QPointF:
        return self.scenePos()

    def hoverEnterEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self.hovered = True
        self.update()

    def hoverLeaveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self.hovered = False
        self.update()


class _Colors:
    """Port colors shared by every item of one canvas."""

    def __init__(self) -> None:
        self.ports: dict[str, QColor] = {}

    def port_color(self, port_type: str) -> QColor:
        color = self.ports.get(port_type)
        if color is None:
            if not port_type:
                return QColor("#9a9a9a")
            index = sum(port_type.encode()) % len(_FALLBACK_PORT_COLORS)
            color = QColor(_FALLBACK_PORT_COLORS[index])
            self.ports[port_type] = color
        return color


class NodeItem(QGraphicsObject):
    """A node: a header with its title, input ports on the left, outputs on
    the right, a state badge top right, an error mark top left."""

    def __init__(
        self,
        node_id: str,
        title: str,
        inputs: Sequence[Port],
        outputs: Sequence[Port],
        color: str,
        subtitle: str,
        colors: _Colors,
    ) -> None:
        super().__init__()
        self.node_id = node_id
        self.title = title
        self.subtitle = subtitle
        self.header_color = QColor(color)
        self.canvas_colors = colors
        self.state = ""
        self.progress = 0.0
        self.state_message = ""
        self.errors: list[str] = []
        self.inputs: dict[str, PortItem] = {}
        self.outputs: dict[str, PortItem] = {}
        self.snap = True
        for p in inputs:
            self._add_port(p, output=False)
        for p in outputs:
            self._add_port(p, output=True)
        self.setFlags(
            QGraphicsItem.GraphicsItemFlag.ItemIsMovable
            | QGraphicsItem.GraphicsItemFlag.ItemIsSelectable
            | QGraphicsItem.GraphicsItemFlag.ItemSendsGeometryChanges
        )
        self.setZValue(1)
        # Panning then blits the node's pixmap instead of drawing its text
        # again; a state or title change repaints it (``update``).
        self.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self._update_tooltip()

    # ----------------------------------------------------------- layout
    def _add_port(self, port: Port, output: bool) -> PortItem:
        item = PortItem(self, port, output)
        (self.outputs if output else self.inputs)[port.name] = item
        self._layout_ports()
        return item

    def ensure_port(self, name: str, output: bool) -> PortItem:
        """The named port, created (without a type) when the host links a
        port the node's description lacks, so such a link still shows."""
        ports = self.outputs if output else self.inputs
        return ports.get(name) or self._add_port(Port(name, ""), output)

    def _layout_ports(self) -> None:
        self.prepareGeometryChange()
        for i, item in enumerate(self.inputs.values()):
            item.setPos(0.0, HEADER_HEIGHT + PORT_ROW * (i + 0.5) + 6)
        for i, item in enumerate(self.outputs.values()):
            item.setPos(NODE_WIDTH, HEADER_HEIGHT + PORT_ROW * (i + 0.5) + 6)

    @property
    def height(self) -> float:
        rows = max(len(self.inputs), len(self.outputs), 1)
        extra = 16.0 if self.subtitle else 0.0
        return HEADER_HEIGHT + rows * PORT_ROW + 12 + extra

    def boundingRect(self) -> QRectF:
        return QRectF(-4, -10, NODE_WIDTH + 14, self.height + 14)

    def body_rect(self) -> QRectF:
        return QRectF(0, 0, NODE_WIDTH, self.height)

    def shape(self) -> QPainterPath:
        path = QPainterPath()
        path.addRoundedRect(self.body_rect(), 6, 6)
        return path

    # ---------------------------------------------------------- painting
    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionGraphicsItem,
        widget: QWidget | None = None,
    ) -> None:
        rect = self.body_rect()
        border = QColor("#2f3640")
        width = 1.2
        if self.state in STATE_COLORS:
            border, width = QColor(STATE_COLORS[self.state]), 2.0
        if self.errors:
            border, width = QColor("#e15759"), 2.0
        if self.isSelected():
            border, width = QColor("#f0a020"), 2.5
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        if lod < LOD_NODE_DETAIL:
            self.paint_overview(painter, border, width, lod)
            return
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(border, width))
        painter.setBrush(QColor("#fdfdfd"))
        painter.drawRoundedRect(rect, 6, 6)
        # Header
        band = QPainterPath()
        band.addRect(QRectF(0, 0, NODE_WIDTH, HEADER_HEIGHT))
        painter.fillPath(self.shape().intersected(band), self.header_color)
        painter.setPen(QPen(border, width))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRoundedRect(rect, 6, 6)
        font = QFont(painter.font())
        font.setBold(True)
        left = 22.0 if self.errors else 8.0
        room = NODE_WIDTH - left - 26
        title = fit_title(self.title, font, room)
        if title != self.title:  # two lines in the smallest size, if need be
            title = "\n".join(wrap_title(self.title, font, room, HEADER_HEIGHT))
        painter.setFont(font)
        painter.setPen(QColor("white"))
        painter.drawText(
            QRectF(left, 0, room, HEADER_HEIGHT),
            Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
            title,
        )
        # Port labels
        font.setBold(False)
        font.setPointSizeF(8.5)
        painter.setFont(font)
        painter.setPen(QColor("#2f3640"))
        for item in self.inputs.values():
            y = item.pos().y()
            painter.drawText(
                QRectF(12, y - 9, NODE_WIDTH / 2 - 8, 18),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                item.port.name,
            )
        for item in self.outputs.values():
            y = item.pos().y()
            painter.drawText(
                QRectF(NODE_WIDTH / 2 - 4, y - 9, NODE_WIDTH / 2 - 8, 18),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight,
                item.port.name,
            )
        if self.subtitle:
            painter.setPen(QColor("#6b7280"))
            painter.drawText(
                QRectF(8, self.height - 20, NODE_WIDTH - 16, 16),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                QFontMetricsF(font).elidedText(
                    self.subtitle, Qt.TextElideMode.ElideRight, NODE_WIDTH - 16
                ),
            )
        self._paint_badge(painter)
        if self.errors:
            self._paint_error_mark(painter)

    def overview_title(self, lod: float) -> tuple[int, tuple[str, ...]]:
        """The on-screen pixel size and the lines of the title that the
        overview draws at zoom ``lod`` (see :func:`overview_lines`)."""
        box = self._overview_title_box(lod)
        return overview_lines(
            self.title, round(box.width() * lod), round(box.height() * lod)
        )

    def _overview_title_box(self, lod: float) -> QRectF:
        """Where the overview writes the title: the node below its header
        strip, clear of the port marks on its edges."""
        pad = PORT_RADIUS + 1 / lod
        top = self._overview_strip(lod) + 0.5 / lod
        return QRectF(pad, top, NODE_WIDTH - 2 * pad, self.height - top - 0.5 / lod)

    @staticmethod
    def _overview_strip(lod: float) -> float:
        """Height of the overview's header strip: 3 px on screen."""
        return min(HEADER_HEIGHT, 3 / lod)

    def paint_overview(
        self, painter: QPainter, border: QColor, width: float, lod: float
    ) -> None:
        """The node zoomed out: its box tinted with its header color, a header
        strip (state on its right, an error on its left) and its title in a
        font sized for the screen (:meth:`overview_title`)."""
        rect = self.body_rect()
        tint = QColor(self.header_color)
        tint.setAlphaF(0.18)
        painter.setPen(QPen(border, width))
        painter.setBrush(QColor("#fdfdfd"))
        painter.drawRect(rect)
        painter.fillRect(rect, tint)
        strip = self._overview_strip(lod)
        painter.fillRect(QRectF(0, 0, NODE_WIDTH, strip), self.header_color)
        third = NODE_WIDTH / 3
        if self.state:
            color = QColor(STATE_COLORS.get(self.state, "#8f9bb3"))
            painter.fillRect(QRectF(NODE_WIDTH - third, 0, third, strip), color)
            if self.state == "running":
                bar = QRectF(0, self.height - 6, NODE_WIDTH * self.progress, 6)
                painter.fillRect(bar, color)
        if self.errors:
            painter.fillRect(QRectF(0, 0, third, strip), QColor("#e15759"))
        r = PORT_RADIUS
        for port in (*self.inputs.values(), *self.outputs.values()):
            p = port.pos()
            painter.fillRect(QRectF(p.x() - r, p.y() - r, 2 * r, 2 * r), port.color)
        px, lines = self.overview_title(lod)
        # Drawn in screen pixels, in the font the lines were laid out in.
        box = self._overview_title_box(lod)
        origin = painter.worldTransform().map(box.topLeft())
        painter.save()
        painter.setWorldTransform(QTransform.fromTranslate(origin.x(), origin.y()))
        font = QFont()
        font.setPixelSize(px)
        painter.setFont(font)
        painter.setPen(QColor("#20242b"))
        step = QFontMetricsF(font).lineSpacing()
        width = box.width() * lod
        y = (box.height() * lod - step * len(lines)) / 2
        for line in lines:
            painter.drawText(
                QRectF(0, y, width, step), Qt.AlignmentFlag.AlignCenter, line
            )
            y += step
        painter.restore()

    def _paint_badge(self, painter: QPainter) -> None:
        if not self.state:
            return
        color = QColor(STATE_COLORS.get(self.state, "#8f9bb3"))
        center = QPointF(NODE_WIDTH - 13, HEADER_HEIGHT / 2)
        r = 8.0
        painter.setPen(QPen(QColor("white"), 1.5))
        painter.setBrush(QColor(255, 255, 255, 60))
        painter.drawEllipse(center, r, r)
        if self.state == "running":
            # A progress ring, and a bar along the node's bottom edge.
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(QColor("white"), 3.0))
            span = -int(360 * 16 * max(0.0, min(1.0, self.progress)))
            box = QRectF(center.x() - r, center.y() - r, 2 * r, 2 * r)
            painter.drawArc(box, 90 * 16, span or -16 * 20)
            bar = QRectF(2, self.height - 5, (NODE_WIDTH - 4) * self.progress, 3)
            painter.fillRect(bar, color)
            return
        painter.setBrush(color)
        painter.setPen(QPen(QColor("white"), 1.5))
        painter.drawEllipse(center, r, r)
        pen = QPen(QColor("white"), 2.0)
        pen.setCapStyle(Qt.PenCapStyle.RoundCap)
        painter.setPen(pen)
        c = center
        if self.state in ("done", "cached"):
            painter.drawPolyline(
                [c + QPointF(-4, 0), c + QPointF(-1, 3), c + QPointF(4, -3)]
            )
        elif self.state == "failed":
            painter.drawLine(c + QPointF(-3, -3), c + QPointF(3, 3))
            painter.drawLine(c + QPointF(-3, 3), c + QPointF(3, -3))
        elif self.state in ("skipped", "queued"):
            painter.drawLine(c + QPointF(-3.5, 0), c + QPointF(3.5, 0))
        elif self.state == "stopped":
            painter.fillRect(QRectF(c.x() - 3, c.y() - 3, 6, 6), QColor("white"))

    def _paint_error_mark(self, painter: QPainter) -> None:
        center = QPointF(11, HEADER_HEIGHT / 2)
        painter.setPen(QPen(QColor("white"), 1.5))
        painter.setBrush(QColor("#e15759"))
        painter.drawEllipse(center, 7, 7)
        font = QFont(painter.font())
        font.setBold(True)
        font.setPointSizeF(8)
        painter.setFont(font)
        painter.drawText(
            QRectF(center.x() - 7, center.y() - 7, 14, 14),
            Qt.AlignmentFlag.AlignCenter,
            "!",
        )

    # ------------------------------------------------------------ state
    def set_state(self, state: str, progress: float, message: str) -> None:
        self.state = state
        self.progress = progress
        self.state_message = message
        self._update_tooltip()
        self.update()

    def set_errors(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        self._update_tooltip()
        self.update()

    def _update_tooltip(self) -> None:
        lines = [self.title]
        if self.state:
            state = self.state
            if self.state == "running":
                state += f" {self.progress:.0%}"
            lines.append(f"State: {state}")
        if self.state_message:
            lines.append(self.state_message)
        lines += [f"• {e}" for e in self.errors]
        self.setToolTip("\n".join(lines))

    def itemChange(
        self, change: QGraphicsItem.GraphicsItemChange, value: object
    ) -> object:
        if (
            change == QGraphicsItem.GraphicsItemChange.ItemPositionChange
            and self.snap
            and isinstance(value, QPointF)
        ):
            return QPointF(
                round(value.x() / GRID) * GRID, round(value.y() / GRID) * GRID
            )
        if change == QGraphicsItem.GraphicsItemChange.ItemPositionHasChanged:
            for ports in (self.inputs, self.outputs):
                for port in ports.values():
                    for link in port.links:
                        link.update_path()
        return super().itemChange(change, value)


def _bezier(a: QPointF, b: QPointF) -> QPainterPath:
    dx = max(40.0, abs(b.x() - a.x()) * 0.5)
    path = QPainterPath(a)
    path.cubicTo(a + QPointF(dx, 0), b - QPointF(dx, 0), b)
    return path


class LinkItem(QGraphicsPathItem):
    """A bezier curve from an output port to an input port."""

    def __init__(self, source: PortItem, target: PortItem) -> None:
        super().__init__()
        self.source = source
        self.target = target
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable)
        self.setZValue(0)
        self.update_path()

    @property
    def key(self) -> LinkKey:
        return (
            self.source.node.node_id,
            self.source.port.name,
            self.target.node.node_id,
            self.target.port.name,
        )

    def update_path(self) -> None:
        self._shape: QPainterPath | None = None
        self.setPath(_bezier(self.source.center(), self.target.center()))

    def shape(self) -> QPainterPath:
        # Hit tests and rubber bands ask often; the stroke changes only
        # with the path.
        if self._shape is None:
            stroker = QPainterPathStroker()
            stroker.setWidth(12)
            self._shape = stroker.createStroke(self.path())
        return self._shape

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionGraphicsItem,
        widget: QWidget | None = None,
    ) -> None:
        detailed = (
            option.levelOfDetailFromTransform(painter.worldTransform()) >= LOD_DETAIL
        )
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, detailed)
        color = QColor(self.source.color)
        width = 2.5
        if self.isSelected():
            color, width = QColor("#f0a020"), 4.0
        painter.setPen(QPen(color, width))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(self.path())


# --------------------------------------------------------------------------
# Interactions
# --------------------------------------------------------------------------


class LinkDragInteraction(Gesture):
    """Left drag from a port draws a curve; releasing on a port of the other
    direction emits ``link_requested`` (always output -> input)."""

    def __init__(self, view: NodeGraphView) -> None:
        super().__init__(view)
        self.view: NodeGraphView = view
        self.start: PortItem | None = None
        self.preview: QGraphicsPathItem | None = None

    def press(self, event: QMouseEvent) -> bool:
        if event.button() != Qt.MouseButton.LeftButton:
            return False
        port = self.view.port_at(self.view.mapToScene(event.position().toPoint()))
        if port is None:
            return False
        self.start = port
        self.preview = QGraphicsPathItem()
        pen = QPen(port.color, 2.0, Qt.PenStyle.DashLine)
        self.preview.setPen(pen)
        self.preview.setZValue(3)
        self.view.scene().addItem(self.preview)
        self._dim_incompatible(port)
        self.move(event)
        return True

    def move(self, event: QMouseEvent) -> None:
        if self.start is None or self.preview is None:
            return
        pos = self.view.mapToScene(event.position().toPoint())
        target = self.view.port_at(pos)
        end = target.center() if target is not None and not target.dimmed else pos
        a, b = self.start.center(), end
        if not self.start.output:
            a, b = b, a
        self.preview.setPath(_bezier(a, b))

    def release(self, event: QMouseEvent) -> None:
        start = self.start
        if self.preview is not None:
            self.view.scene().removeItem(self.preview)
        self.preview = None
        self.start = None
        self._undim()
        if start is None:
            return
        self.view.last_release_view = event.position().toPoint()
        target = self.view.port_at(self.view.mapToScene(event.position().toPoint()))
        if target is None or target is start:
            return
        if target.output == start.output:
            kind = "outputs" if start.output else "inputs"
            self.view.show_link_refused(
                f"Links join an output to an input, not two {kind}."
            )
            return
        src, dst = (start, target) if start.output else (target, start)
        self.view.link_requested.emit(
            src.node.node_id, src.port.name, dst.node.node_id, dst.port.name
        )

    def _dim_incompatible(self, start: PortItem) -> None:
        for node in self.view.nodes.values():
            for port in (*node.inputs.values(), *node.outputs.values()):
                port.dimmed = (
                    port.output == start.output
                    or port.node is start.node
                    or (
                        bool(start.port.type and port.port.type)
                        and port.port.type != start.port.type
                    )
                )
                port.update()

    def _undim(self) -> None:
        for node in self.view.nodes.values():
            for port in (*node.inputs.values(), *node.outputs.values()):
                if port.dimmed:
                    port.dimmed = False
                    port.update()


class MoveTracker(Gesture):
    """Never claims a press; remembers where the selected nodes were and, on
    release, reports the ones that moved as one ``nodes_moved``."""

    def __init__(self, view: NodeGraphView) -> None:
        super().__init__(view)
        self.view: NodeGraphView = view
        self._start: dict[str, QPointF] = {}

    def begin(self) -> None:
        self._start = {
            n.node_id: n.pos() for n in self.view.nodes.values() if n.isSelected()
        }

    def release(self, event: QMouseEvent) -> None:
        moved = {}
        for node_id, old in self._start.items():
            node = self.view.nodes.get(node_id)
            if node is not None and node.pos() != old:
                new = node.pos()
                moved[node_id] = ((old.x(), old.y()), (new.x(), new.y()))
        self._start = {}
        if moved:
            self.view.nodes_moved.emit(moved)


# --------------------------------------------------------------------------
# The view
# --------------------------------------------------------------------------


class NodeGraphView(CanvasView):
    """The canvas. Positions are scene units (a node's top-left corner).

    Signals
    -------
    link_requested(from_node, from_port, to_node, to_port)
        The user dragged between an output and an input.
    nodes_moved(dict)
        ``{node_id: ((old_x, old_y), (new_x, new_y))}``, once per drag.
    delete_requested(list)
        Node ids selected when the user pressed Delete.
    links_delete_requested(list)
        Link keys selected when the user pressed Delete.
    node_drop_requested(type_name, QPointF)
        A node type was dropped at this scene position.
    node_params_drop_requested(type_name, dict, QPointF, node_id)
        A node type with parameters was dropped at this scene position, on
        the node ``node_id`` (empty: on no node).
    node_clicked(node_id)
    node_double_clicked(node_id)
    selection_changed(list)
        The selected node ids.
    """

    link_requested = Signal(str, str, str, str)
    nodes_moved = Signal(dict)
    delete_requested = Signal(list)
    links_delete_requested = Signal(list)
    node_drop_requested = Signal(str, QPointF)
    node_params_drop_requested = Signal(str, dict, QPointF, str)
    node_clicked = Signal(str)
    node_double_clicked = Signal(str)
    selection_changed = Signal(list)

    min_zoom, max_zoom = MIN_ZOOM, MAX_ZOOM
    space_pans = True

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        scene = QGraphicsScene(self)
        scene.setSceneRect(
            -SCENE_EXTENT / 2, -SCENE_EXTENT / 2, SCENE_EXTENT, SCENE_EXTENT
        )
        scene.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
        self.setScene(scene)
        scene.selectionChanged.connect(self._on_scene_selection_changed)
        self.nodes: dict[str, NodeItem] = {}
        self.links: dict[LinkKey, LinkItem] = {}
        self._colors = _Colors()
        self.snap_to_grid = True
        self.last_release_view = QPoint()
        self.refusal_label = QLabel(self.viewport())
        self.refusal_label.setWordWrap(True)
        self.refusal_label.setMaximumWidth(360)
        self.refusal_label.setStyleSheet(
            "background: #fff8dc; color: #5a3d00; border: 1px solid #d4b22c;"
            "border-radius: 4px; padding: 4px 6px;"
        )
        self.refusal_label.hide()
        self._refusal_timer = QTimer(self, singleShot=True, interval=5000)
        self._refusal_timer.timeout.connect(self.refusal_label.hide)
        self.last_refusal = ""
        """The reason of the last refused link (also shown as a tooltip)."""
        self.empty_text = ""
        self._pan = PanGesture(self)
        self._link_drag = LinkDragInteraction(self)
        self._move_tracker = MoveTracker(self)
        self._interactions: list[Gesture] = [self._pan, self._link_drag]
        self._active: Gesture | None = None

        self.setRenderHints(
            QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing
        )
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.NoAnchor)
        self.setResizeAnchor(QGraphicsView.ViewportAnchor.AnchorViewCenter)
        self.setDragMode(QGraphicsView.DragMode.RubberBandDrag)
        self.setRubberBandSelectionMode(Qt.ItemSelectionMode.IntersectsItemShape)
        self.setAcceptDrops(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.centerOn(0, 0)

    # ------------------------------------------------------------ model
    def set_port_colors(self, colors: dict[str, str]) -> None:
        for name, color in colors.items():
            self._colors.ports[name] = QColor(color)
        self.viewport().update()

    def add_node(
        self,
        node_id: str,
        title: str,
        inputs: Iterable[Port | tuple[str, str]] = (),
        outputs: Iterable[Port | tuple[str, str]] = (),
        pos: QPointF | tuple[float, float] = (0.0, 0.0),
        color: str = "#4a5668",
        subtitle: str = "",
    ) -> NodeItem:
        if node_id in self.nodes:
            raise ValueError(f"The canvas already has a node {node_id!r}.")
        item = NodeItem(
            node_id,
            title,
            [_as_port(p) for p in inputs],
            [_as_port(p) for p in outputs],
            color,
            subtitle,
            self._colors,
        )
        item.snap = False  # the host's position is kept exactly
        item.setPos(_point(pos))
        item.snap = self.snap_to_grid
        self.nodes[node_id] = item
        self.scene().addItem(item)
        if len(self.nodes) == 1:
            self.viewport().update()  # the empty-canvas hint goes away
        return item

    def remove_node(self, node_id: str) -> None:
        item = self.nodes.pop(node_id, None)
        if item is None:
            return
        for key in [k for k in self.links if node_id in (k[0], k[2])]:
            self.remove_link(*key)
        self.scene().removeItem(item)
        if not self.nodes:
            self.viewport().update()

    def move_node(self, node_id: str, pos: QPointF | tuple[float, float]) -> None:
        item = self.nodes.get(node_id)
        if item is None:
            return
        item.snap = False
        item.setPos(_point(pos))
        item.snap = self.snap_to_grid

    def node_pos(self, node_id: str) -> tuple[float, float]:
        pos = self.nodes[node_id].pos()
        return (pos.x(), pos.y())

    def set_node_title(
        self, node_id: str, title: str, subtitle: str | None = None
    ) -> None:
        item = self.nodes.get(node_id)
        if item is None:
            return
        item.title = title
        if subtitle is not None:
            item.prepareGeometryChange()
            item.subtitle = subtitle
        item._update_tooltip()
        item.update()

    def add_link(
        self, from_node: str, from_port: str, to_node: str, to_port: str
    ) -> None:
        """Draw a link; ignored when either node is not on the canvas."""
        key = (from_node, from_port, to_node, to_port)
        a, b = self.nodes.get(from_node), self.nodes.get(to_node)
        if key in self.links or a is None or b is None:
            return
        source = a.ensure_port(from_port, output=True)
        target = b.ensure_port(to_port, output=False)
        link = LinkItem(source, target)
        source.links.append(link)
        target.links.append(link)
        self.links[key] = link
        self.scene().addItem(link)
        target.update()

    def remove_link(
        self, from_node: str, from_port: str, to_node: str, to_port: str
    ) -> None:
        link = self.links.pop((from_node, from_port, to_node, to_port), None)
        if link is None:
            return
        for port in (link.source, link.target):
            if link in port.links:
                port.links.remove(link)
            port.update()
        self.scene().removeItem(link)

    def clear(self) -> None:
        self.scene().clearSelection()
        for key in list(self.links):
            self.remove_link(*key)
        for node_id in list(self.nodes):
            self.remove_node(node_id)

    # ------------------------------------------------------------ state
    def set_node_state(
        self, node_id: str, state: str, progress: float = 0.0, message: str = ""
    ) -> None:
        """Badge for ``queued``, ``running`` (``progress`` in [0, 1]),
        ``done``, ``cached``, ``failed``, ``skipped``, ``stopped``; ``""``
        removes it."""
        item = self.nodes.get(node_id)
        if item is not None:
            item.set_state(state, max(0.0, min(1.0, progress)), message)

    def node_state(self, node_id: str) -> tuple[str, float]:
        item = self.nodes[node_id]
        return item.state, item.progress

    def clear_node_states(self) -> None:
        for item in self.nodes.values():
            item.set_state("", 0.0, "")

    def set_node_errors(self, node_id: str, errors: Sequence[str]) -> None:
        """A red mark on the node, with the sentences as its tooltip."""
        item = self.nodes.get(node_id)
        if item is not None:
            item.set_errors(errors)

    def node_errors(self, node_id: str) -> list[str]:
        return list(self.nodes[node_id].errors)

    def show_link_refused(self, reason: str) -> None:
        """Tell the user why the link they just dragged was not made: a
        tooltip-like note at the mouse, hidden after a few seconds."""
        self.last_refusal = reason
        label = self.refusal_label
        label.setText(reason)
        label.adjustSize()
        pos = self.last_release_view
        if pos.isNull():
            pos = self.viewport().rect().center()
        area = self.viewport().rect()
        x = min(max(4, pos.x() + 12), max(4, area.width() - label.width() - 4))
        y = min(max(4, pos.y() + 16), max(4, area.height() - label.height() - 4))
        label.move(x, y)
        label.show()
        label.raise_()
        self._refusal_timer.start()

    # -------------------------------------------------------- selection
    def selected_nodes(self) -> list[str]:
        return [n.node_id for n in self.nodes.values() if n.isSelected()]

    def selected_links(self) -> list[LinkKey]:
        return [k for k, link in self.links.items() if link.isSelected()]

    def select_nodes(self, node_ids: Iterable[str]) -> None:
        wanted = set(node_ids)
        scene = self.scene()
        scene.blockSignals(True)
        try:
            scene.clearSelection()
            for node_id in wanted:
                if node_id in self.nodes:
                    self.nodes[node_id].setSelected(True)
        finally:
            scene.blockSignals(False)
        self._on_scene_selection_changed()

    def _on_scene_selection_changed(self) -> None:
        self.selection_changed.emit(self.selected_nodes())

    # ------------------------------------------------------- geometry
    def port_at(self, scene_pos: QPointF, radius: float = 10.0) -> PortItem | None:
        area = QRectF(
            scene_pos.x() - radius, scene_pos.y() - radius, 2 * radius, 2 * radius
        )
        ports = [i for i in self.scene().items(area) if isinstance(i, PortItem)]
        if not ports:
            return None
        return min(ports, key=lambda p: QLineF(p.center(), scene_pos).length())

    def port_scene_pos(self, node_id: str, port: str, output: bool) -> QPointF:
        node = self.nodes[node_id]
        return (node.outputs if output else node.inputs)[port].center()

    def node_scene_rect(self, node_id: str) -> QRectF:
        node = self.nodes[node_id]
        return node.mapRectToScene(node.body_rect())

    def fit_view(self, margin: float = 40.0) -> None:
        """Show every node; never zoom in past 100 %."""
        if not self.nodes:
            self.resetTransform()
            self.centerOn(0, 0)
            return
        rect = QRectF()
        for node in self.nodes.values():
            rect = rect.united(node.sceneBoundingRect())
        rect.adjust(-margin, -margin, margin, margin)
        self.fit_rect(rect, 1.0)

    # ---------------------------------------------------------- painting
    def drawBackground(self, painter: QPainter, rect: QRectF | QRect) -> None:
        background, fine, coarse = CANVAS[theme_name(self.palette())]
        painter.fillRect(rect, QColor(background))
        step = GRID if self.zoom() >= LOD_DETAIL else GRID * 5
        left = math.floor(rect.left() / step) * step
        top = math.floor(rect.top() / step) * step
        lines: tuple[list[QLineF], list[QLineF]] = ([], [])  # fine, coarse
        x = left
        while x < rect.right():
            lines[round(x / step) % 5 == 0].append(
                QLineF(x, rect.top(), x, rect.bottom())
            )
            x += step
        y = top
        while y < rect.bottom():
            lines[round(y / step) % 5 == 0].append(
                QLineF(rect.left(), y, rect.right(), y)
            )
            y += step
        # Axis-aligned hairlines need no antialiasing, which costs most here.
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        painter.setPen(QPen(QColor(fine), 0))
        painter.drawLines(lines[0])
        painter.setPen(QPen(QColor(coarse), 0))
        painter.drawLines(lines[1])
        painter.restore()

    def drawForeground(self, painter: QPainter, rect: QRectF | QRect) -> None:
        if self.nodes or not self.empty_text:
            return
        painter.save()
        painter.resetTransform()
        painter.setPen(QColor("#7a828e"))
        font = QFont(painter.font())
        font.setPointSizeF(11)
        painter.setFont(font)
        painter.drawText(
            QRectF(self.viewport().rect()),
            Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
            self.empty_text,
        )
        painter.restore()

    def set_empty_text(self, text: str) -> None:
        self.empty_text = text
        self.viewport().update()

    # ------------------------------------------------------------ mouse
    def mousePressEvent(self, event: QMouseEvent) -> None:
        for interaction in self._interactions:
            if interaction.press(event):
                self._active = interaction
                event.accept()
                return
        super().mousePressEvent(event)
        if event.button() == Qt.MouseButton.LeftButton:
            self._move_tracker.begin()
            self._active = self._move_tracker
            item = self._node_under(event.position().toPoint())
            if item is not None:
                self.node_clicked.emit(item.node_id)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._active is not None and self._active is not self._move_tracker:
            self._active.move(event)
            event.accept()
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        active, self._active = self._active, None
        if active is not None and active is not self._move_tracker:
            active.release(event)
            event.accept()
            return
        super().mouseReleaseEvent(event)
        event.accept()  # a rubber band release is handled too
        if active is not None:
            active.release(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        item = self._node_under(event.position().toPoint())
        if item is not None:
            self.node_double_clicked.emit(item.node_id)
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def _node_under(self, view_pos: QPoint) -> NodeItem | None:
        item = self.itemAt(view_pos)
        while item is not None and not isinstance(item, NodeItem):
            item = item.parentItem()
        return item

    # --------------------------------------------------------- keyboard
    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        if key in (Qt.Key.Key_Delete, Qt.Key.Key_Backspace):
            nodes, links = self.selected_nodes(), self.selected_links()
            if nodes:
                self.delete_requested.emit(nodes)
            if links:
                self.links_delete_requested.emit(links)
            event.accept()
            return
        super().keyPressEvent(event)  # Space: pan (CanvasView)

    # ------------------------------------------------------------- drops
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasFormat(NODE_TYPE_MIME):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if event.mimeData().hasFormat(NODE_TYPE_MIME):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        mime = event.mimeData()
        if not mime.hasFormat(NODE_TYPE_MIME):
            event.ignore()
            return
        type_name = bytes(mime.data(NODE_TYPE_MIME).data()).decode("utf-8")
        event.acceptProposedAction()
        scene_pos = self.mapToScene(event.position().toPoint())
        if not mime.hasFormat(NODE_PARAMS_MIME):
            self.node_drop_requested.emit(type_name, scene_pos)
            return
        try:
            params = json.loads(bytes(mime.data(NODE_PARAMS_MIME).data()))
        except ValueError:
            params = None
        if not isinstance(params, dict):
            self.node_drop_requested.emit(type_name, scene_pos)
            return
        under = self._node_under(event.position().toPoint())
        self.node_params_drop_requested.emit(
            type_name, params, scene_pos, under.node_id if under else ""
        )


def _point(pos: QPointF | tuple[float, float]) -> QPointF:
    return pos if isinstance(pos, QPointF) else QPointF(float(pos[0]), float(pos[1]))
