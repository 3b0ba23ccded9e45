"""A canvas for state machines: statuses as boxes, transitions as arrows.

The editor shows a graph it is given (:meth:`StateMachineEditor.set_graph`)
and reports what the user asks for; it never changes the graph itself:

* ``status_add_requested(x, y)`` — double-click on empty space;
* ``transition_requested(source, target)`` — drag from a status's handle
  (the dot on its right edge), or Shift-drag from the status, onto another
  status (or onto itself for a loop);
* ``statuses_moved({name: (x, y)})`` — once per mouse release after a drag;
* ``selection_changed(kind, key)`` — ``("status", name)``,
  ``("transition", key)`` or ``("", None)``;
* ``delete_requested()`` — the Delete key.

Start statuses get a blue border and an entry arrow, terminal statuses a
double border (green when they count as success, red otherwise). The
source ``"*"`` means "every status": such edges start from a dashed
"any status" box; the target ``"*"`` means "stays", drawn as a loop.
:func:`layered_layout` and :func:`circular_layout` place statuses.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QLineF, QPointF, QRect, QRectF, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetricsF,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPainterPathStroker,
    QPen,
    QPolygonF,
    QResizeEvent,
    QShowEvent,
    QTransform,
)
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsLineItem,
    QGraphicsObject,
    QGraphicsScene,
    QGraphicsSceneHoverEvent,
    QGraphicsView,
    QStyleOptionGraphicsItem,
    QWidget,
)

from widgets.canvas import CanvasView
from widgets.theme import CANVAS, theme_name

ANY = "*"
H_GAP = 210.0
V_GAP = 120.0
BOX_H = 44.0
MIN_BOX_W = 118.0
HANDLE_R = 5.5
READABLE_PX = 9
"""The smallest on-screen text size (device-independent px) a status name is
drawn in: zoomed out further, the name keeps this size (spilling up to
:data:`NAME_SPILL` past its box, then elided; the tooltip has it whole)."""
NAME_SPILL = 40.0
"""How far (scene px) a zoomed-out status name may reach past each side of
its box; part of the item's bounding rect."""
EDGE_LABEL_MIN_PX = 7.0
"""Below this on-screen size a transition's label is not drawn (it would be
a grey smudge over the arrows); its tooltip names it."""

COLORS = {
    "background": "#f6f7f9",
    "grid": "#e8ebef",
    "box": "#ffffff",
    "border": "#7b8794",
    "text": "#1f2933",
    "start": "#2a7de1",
    "success_fill": "#e6f4e4",
    "success": "#2e9e3e",
    "fail_fill": "#fbe6e4",
    "fail": "#c8413a",
    "selected": "#f0a30a",
    "problem": "#d62728",
    "edge": "#69768a",
    "label_bg": "#ffffff",
    "any_fill": "#eef1f5",
}


@dataclass(frozen=True)
class Edge:
    """One transition: ``key`` identifies it to the caller (an index)."""

    key: Any
    source: str
    target: str
    label: str = ""


# ---------------------------------------------------------------- layouts


def text_width(texts: Iterable[str], point_size: float = 8.5) -> float:
    """Width in pixels of the widest of ``texts`` in the canvas's font."""
    font = QFont()
    font.setPointSizeF(point_size)
    fm = QFontMetricsF(font)
    return max((fm.horizontalAdvance(t) for t in texts), default=0.0)


def layered_layout(
    statuses: Sequence[str],
    edges: Iterable[tuple[str | None, str | None]],
    start: str = "",
    label_width: float = 0.0,
) -> dict[str, tuple[float, float]]:
    """Left-to-right layers: each status one layer right of its furthest
    predecessor (back edges of cycles ignored), ordered within a layer by
    the mean position of their neighbours to keep arrows short. Layers are
    far enough apart for the widest box plus ``label_width`` (px), so
    transition labels fit between the boxes. An edge whose end is not one
    of ``statuses`` (or None, not given) is left out."""
    names = [s for s in statuses if s != ANY]
    known = set(names)
    out_edges: dict[str, list[str]] = {s: [] for s in names}
    for a, b in edges:
        if a in known and b in known and a != b and b not in out_edges[a]:
            out_edges[a].append(b)
    # Depth-first from the start to find back edges (they close cycles).
    order = ([start] if start in known else []) + [s for s in names if s != start]
    state: dict[str, int] = {}
    forward: dict[str, list[str]] = {s: [] for s in names}
    for root in order:
        if root in state:
            continue
        stack = [(root, iter(out_edges[root]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                continue  # back edge
            else:
                forward[node].append(nxt)
                if nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, iter(out_edges[nxt])))
    # Longest path layering on the acyclic forward edges.
    preds: dict[str, list[str]] = {s: [] for s in names}
    for a, targets in forward.items():
        for b in targets:
            preds[b].append(a)
    layer: dict[str, int] = {}

    def depth(n: str, seen: frozenset[str] = frozenset()) -> int:
        if n not in layer:
            layer[n] = 1 + max(
                (depth(p, seen | {n}) for p in preds[n] if p not in seen), default=-1
            )
        return layer[n]

    for n in names:
        depth(n)
    n_layers = max(layer.values(), default=0) + 1
    layers: list[list[str]] = [[] for _ in range(n_layers)]
    for n in names:
        layers[layer[n]].append(n)
    neighbours: dict[str, set[str]] = {s: set() for s in names}
    for a, targets in out_edges.items():
        for b in targets:
            neighbours[a].add(b)
            neighbours[b].add(a)
    pos_in: dict[str, float] = {}
    for col in layers:
        for i, n in enumerate(col):
            pos_in[n] = i - (len(col) - 1) / 2
    for sweep in range(6):
        rng = range(1, n_layers) if sweep % 2 == 0 else range(n_layers - 2, -1, -1)
        for li in rng:
            col = layers[li]

            def bary(n: str) -> float:
                ys = [pos_in[m] for m in neighbours[n] if layer[m] != layer[n]]
                return sum(ys) / len(ys) if ys else pos_in[n]

            col.sort(key=bary)
            for i, n in enumerate(col):
                pos_in[n] = i - (len(col) - 1) / 2
    box = max(MIN_BOX_W, text_width(names, 10.0) * 1.1 + 36)
    gap = max(H_GAP, box + label_width + 34)
    return {n: (layer[n] * gap, pos_in[n] * V_GAP) for col in layers for n in col}


def circular_layout(
    statuses: Sequence[str], radius: float | None = None
) -> dict[str, tuple[float, float]]:
    """Statuses evenly on a circle, the first at the left."""
    names = [s for s in statuses if s != ANY]
    n = max(len(names), 1)
    r = radius if radius is not None else max(140.0, n * 150.0 / (2 * math.pi))
    return {
        s: (r * -math.cos(2 * math.pi * i / n), r * -math.sin(2 * math.pi * i / n))
        for i, s in enumerate(names)
    }


# ---------------------------------------------------------------- items


class StatusItem(QGraphicsObject):
    """A status box; its position is its centre."""

    def __init__(
        self, name: str, editor: StateMachineEditor, ghost: bool = False
    ) -> None:
        super().__init__()
        self.name = name
        self._editor = editor
        self.start = self.terminal = self.success = False
        self.ghost = ghost
        """A name that transitions use but that is not a status."""
        self.pseudo = name == ANY or ghost
        self.problem = ""
        self._hover_handle = False
        font = QFont()
        font.setPointSizeF(10)
        self._font = font
        self._bold = QFont(font)
        self._bold.setBold(True)
        text = f"? {name}" if ghost else "✱ any status" if name == ANY else name
        self.text = text
        w = QFontMetricsF(self._bold).horizontalAdvance(text) + 36
        self.w = max(MIN_BOX_W, w)
        flags = QGraphicsItem.GraphicsItemFlag
        self.setFlag(flags.ItemIsSelectable, not self.pseudo)
        self.setFlag(flags.ItemIsMovable, True)
        self.setFlag(flags.ItemSendsGeometryChanges, True)
        self.setAcceptHoverEvents(True)
        self.setZValue(2)
        self.setCursor(Qt.CursorShape.OpenHandCursor)
        self._update_tooltip()

    def rect(self) -> QRectF:
        return QRectF(-self.w / 2, -BOX_H / 2, self.w, BOX_H)

    def boundingRect(self) -> QRectF:
        return self.rect().adjusted(-18 - NAME_SPILL, -6, HANDLE_R + 6 + NAME_SPILL, 6)

    def shape(self) -> QPainterPath:
        path = QPainterPath()
        path.setFillRule(Qt.FillRule.WindingFill)  # the handle overlaps the box
        path.addRoundedRect(self.rect(), 10, 10)
        path.addEllipse(self.handle_center(), HANDLE_R + 3, HANDLE_R + 3)
        return path

    def handle_center(self) -> QPointF:
        return QPointF(self.w / 2, 0)

    def on_handle(self, scene_pos: QPointF) -> bool:
        if self.pseudo:
            return False
        local = self.mapFromScene(scene_pos)
        return QLineF(local, self.handle_center()).length() <= HANDLE_R + 4

    def set_flags(self, start: bool, terminal: bool, success: bool) -> None:
        if (start, terminal, success) != (self.start, self.terminal, self.success):
            self.start, self.terminal, self.success = start, terminal, success
            self._update_tooltip()
            self.update()

    def set_problem(self, message: str) -> None:
        if message != self.problem:
            self.problem = message
            self._update_tooltip()
            self.update()

    def _update_tooltip(self) -> None:
        if self.ghost:
            tip = f"'{self.name}' is not a status; add it or fix the transitions."
        elif self.pseudo:
            tip = "Transitions from every non-terminal status."
        else:
            marks = [
                m
                for m, on in (
                    ("start", self.start),
                    ("terminal", self.terminal),
                    ("success", self.success),
                )
                if on
            ]
            tip = self.name + (f" ({', '.join(marks)})" if marks else "")
            tip += (
                "\nDrag the dot on the right onto another status to add a transition."
            )
        if self.problem:
            tip = f"{self.problem}\n\n{tip}"
        self.setToolTip(tip)

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionGraphicsItem,
        widget: QWidget | None = None,
    ) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = self.rect()
        fill = QColor(COLORS["box"])
        border = QColor(COLORS["border"])
        width = 1.4
        if self.pseudo:
            fill = QColor(COLORS["any_fill"])
        if self.ghost:
            border, fill = QColor(COLORS["problem"]), QColor(COLORS["fail_fill"])
        elif self.terminal:
            ok = self.success
            fill = QColor(COLORS["success_fill" if ok else "fail_fill"])
            border = QColor(COLORS["success" if ok else "fail"])
            width = 1.8
        if self.start:
            border = QColor(COLORS["start"])
            width = 2.4
        if self.isSelected():
            border = QColor(COLORS["selected"])
            width = 3.0
        if self.problem:
            border = QColor(COLORS["problem"])
            width = 3.0
        pen = QPen(border, width)
        if self.pseudo:
            pen.setStyle(Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.setBrush(fill)
        painter.drawRoundedRect(rect, 10, 10)
        if self.terminal:
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(border, 1.2))
            painter.drawRoundedRect(rect.adjusted(4, 4, -4, -4), 7, 7)
        if self.start:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(COLORS["start"]))
            x = rect.left()
            painter.drawPolygon(
                QPolygonF([QPointF(x - 15, -7), QPointF(x - 3, 0), QPointF(x - 15, 7)])
            )
        font = self._bold if self.start else self._font
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        detailed = QFontMetricsF(font).height() * lod >= READABLE_PX * 1.2
        if detailed:
            painter.setPen(QColor(COLORS["text"]))
            painter.setFont(font)
            painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, self.text)
        else:
            self._paint_screen_name(painter, fill, lod)
        if self.problem:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(COLORS["problem"]))
            badge = QPointF(rect.right() - 10, rect.top() + 2)
            painter.drawEllipse(badge, 8, 8)
            painter.setPen(QColor("white"))
            painter.setFont(self._bold)
            painter.drawText(
                QRectF(badge.x() - 8, badge.y() - 8, 16, 16),
                Qt.AlignmentFlag.AlignCenter,
                "!",
            )
        if not self.pseudo and (detailed or self._hover_handle):
            # zoomed out, the dot would cover the name's last letter
            painter.setPen(QPen(QColor("white"), 1.5))
            painter.setBrush(
                QColor(COLORS["start"] if self._hover_handle else "#9aa7b5")
            )
            painter.drawEllipse(self.handle_center(), HANDLE_R, HANDLE_R)

    def _paint_screen_name(self, painter: QPainter, fill: QColor, lod: float) -> None:
        """The name zoomed out: :data:`READABLE_PX` on screen whatever the
        zoom, on a pill of the box's fill where it is wider than the box."""
        font = QFont(self._bold if self.start else self._font)
        font.setPixelSize(READABLE_PX)
        metrics = QFontMetricsF(font)
        room = (self.w + 2 * NAME_SPILL) * lod - 4
        text = metrics.elidedText(self.text, Qt.TextElideMode.ElideRight, room)
        centre = painter.worldTransform().map(QPointF(0, 0))
        width = metrics.horizontalAdvance(text) + 4
        height = metrics.height()
        painter.save()
        painter.setWorldTransform(QTransform.fromTranslate(centre.x(), centre.y()))
        pill = QRectF(-width / 2, -height / 2, width, height)
        if width > self.w * lod:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(fill)
            painter.drawRoundedRect(pill, 3, 3)
        painter.setPen(QColor(COLORS["text"]))
        painter.setFont(font)
        painter.drawText(pill, Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()

    def hoverMoveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        on = self.on_handle(event.scenePos())
        if on != self._hover_handle:
            self._hover_handle = on
            self.setCursor(
                Qt.CursorShape.CrossCursor if on else Qt.CursorShape.OpenHandCursor
            )
            self.update()

    def hoverLeaveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        if self._hover_handle:
            self._hover_handle = False
            self.update()

    def itemChange(self, change: QGraphicsItem.GraphicsItemChange, value: Any) -> Any:
        if change == QGraphicsItem.GraphicsItemChange.ItemPositionHasChanged:
            self._editor._on_status_item_moved(self)
        return super().itemChange(change, value)


class EdgeItem(QGraphicsItem):
    """A transition arrow with its label; ``bend`` curves it sideways (px),
    ``loop`` > 0 draws a loop of that height above the source."""

    def __init__(self, edge: Edge, source: StatusItem, target: StatusItem) -> None:
        super().__init__()
        self.edge = edge
        self.source = source
        self.target = target
        self.bend = 0.0
        self.loop = 0.0
        self.problem = ""
        self._path = QPainterPath()
        self._arrow = QPolygonF()
        self._label_rect = QRectF()
        font = QFont()
        font.setPointSizeF(8.5)
        self._font = font
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable, True)
        self.setZValue(1)
        self._update_tooltip()

    def set_problem(self, message: str) -> None:
        if message != self.problem:
            self.problem = message
            self._update_tooltip()
            self.update()

    def _update_tooltip(self) -> None:
        tip = f"{self.edge.source} → {self.edge.target}: {self.edge.label}"
        self.setToolTip(f"{self.problem}\n\n{tip}" if self.problem else tip)

    def update_path(self) -> None:
        self.prepareGeometryChange()
        path = QPainterPath()
        s_box = self.source.rect().translated(self.source.pos())
        if self.loop > 0:
            c = self.source.pos()
            top = s_box.top()
            x0, x1 = c.x() - 22, c.x() + 22
            h = self.loop
            p0, p1 = QPointF(x0, top), QPointF(x1, top)
            path.moveTo(p0)
            path.cubicTo(QPointF(x0 - 18, top - h), QPointF(x1 + 18, top - h), p1)
            tip, tangent_from = p1, QPointF(x1 + 18, top - h)
            mid = QPointF(c.x(), top - h * 0.75)
        else:
            a, b = self.source.pos(), self.target.pos()
            line = QLineF(a, b)
            if line.length() < 1:
                self._path = path
                return
            normal = QPointF(-line.dy(), line.dx()) / line.length()
            ctrl = (a + b) / 2 + normal * (self.bend * 2)
            t_box = self.target.rect().translated(b)
            p0 = _exit_point(s_box, a, ctrl)
            p1 = _exit_point(t_box, b, ctrl)
            path.moveTo(p0)
            path.quadTo(ctrl, p1)
            tip, tangent_from = p1, ctrl
            mid = path.pointAtPercent(0.5)
        self._path = path
        direction = QLineF(tangent_from, tip)
        if direction.length() > 0:
            unit = QPointF(direction.dx(), direction.dy()) / direction.length()
            normal = QPointF(-unit.y(), unit.x())
            base = tip - unit * 10
            self._arrow = QPolygonF([tip, base + normal * 4.5, base - normal * 4.5])
        fm = QFontMetricsF(self._font)
        w = fm.horizontalAdvance(self.edge.label) + 10
        h = fm.height() + 4
        self._label_rect = (
            QRectF(mid.x() - w / 2, mid.y() - h / 2, w, h)
            if self.edge.label
            else QRectF()
        )
        self.update()

    def boundingRect(self) -> QRectF:
        return (
            self._path.boundingRect()
            .united(self._arrow.boundingRect())
            .united(self._label_rect)
            .adjusted(-4, -4, 4, 4)
        )

    def shape(self) -> QPainterPath:
        stroker = QPainterPathStroker()
        stroker.setWidth(10)
        shape = stroker.createStroke(self._path)
        if not self._label_rect.isNull():
            shape.addRect(self._label_rect)
        return shape

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionGraphicsItem,
        widget: QWidget | None = None,
    ) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        color = QColor(COLORS["edge"])
        width = 1.5
        if self.isSelected():
            color, width = QColor(COLORS["selected"]), 2.6
        if self.problem:
            color, width = QColor(COLORS["problem"]), 2.6
        painter.setPen(QPen(color, width))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(self._path)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(color)
        painter.drawPolygon(self._arrow)
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        readable = QFontMetricsF(self._font).height() * lod >= EDGE_LABEL_MIN_PX
        if readable and not self._label_rect.isNull():
            painter.setPen(
                QPen(
                    color if self.problem or self.isSelected() else QColor("#c9d0d8"), 1
                )
            )
            painter.setBrush(QColor(COLORS["label_bg"]))
            painter.drawRoundedRect(self._label_rect, 4, 4)
            painter.setPen(
                QColor(COLORS["problem"] if self.problem else COLORS["text"])
            )
            painter.setFont(self._font)
            painter.drawText(
                self._label_rect, Qt.AlignmentFlag.AlignCenter, self.edge.label
            )


def _exit_point(rect: QRectF, center: QPointF, toward: QPointF) -> QPointF:
    """Where the segment from ``center`` toward ``toward`` leaves ``rect``."""
    dx, dy = toward.x() - center.x(), toward.y() - center.y()
    if dx == 0 and dy == 0:
        return center
    tx = (rect.width() / 2) / abs(dx) if dx else math.inf
    ty = (rect.height() / 2) / abs(dy) if dy else math.inf
    t = min(tx, ty)
    return QPointF(center.x() + dx * t, center.y() + dy * t)


# ---------------------------------------------------------------- gestures


class _ConnectGesture:
    """Drag from a status to another: a rubber line, then a request."""

    def __init__(self, editor: StateMachineEditor, source: StatusItem) -> None:
        self.editor = editor
        self.source = source
        self.line = QGraphicsLineItem()
        pen = QPen(QColor(COLORS["start"]), 2, Qt.PenStyle.DashLine)
        self.line.setPen(pen)
        self.line.setZValue(5)
        editor.scene().addItem(self.line)
        self.move(source.pos())

    def move(self, scene_pos: QPointF) -> None:
        self.line.setLine(QLineF(self.source.pos(), scene_pos))

    def finish(self, scene_pos: QPointF) -> None:
        self.editor.scene().removeItem(self.line)
        target = self.editor.status_at(scene_pos)
        if target is not None and not target.pseudo:
            self.editor.transition_requested.emit(self.source.name, target.name)


class _MoveGesture:
    """Remembers where the statuses were on press; reports moves on release."""

    def __init__(self, editor: StateMachineEditor) -> None:
        self.editor = editor
        self.start = {
            name: QPointF(item.pos()) for name, item in editor._statuses.items()
        }

    def finish(self) -> None:
        moved = {
            name: (item.pos().x(), item.pos().y())
            for name, item in self.editor._statuses.items()
            if name in self.start
            and not item.pseudo
            and QLineF(item.pos(), self.start[name]).length() > 0.5
        }
        if moved:
            self.editor.statuses_moved.emit(moved)


# ---------------------------------------------------------------- the view


class StateMachineEditor(CanvasView):
    status_add_requested = Signal(float, float)
    transition_requested = Signal(str, str)
    statuses_moved = Signal(dict)
    selection_changed = Signal(str, object)
    delete_requested = Signal()

    # Ctrl+wheel zooms; the plain wheel scrolls the view.
    wheel_zoom_modifier = Qt.KeyboardModifier.ControlModifier

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        scene = QGraphicsScene(self)
        scene.setSceneRect(QRectF(-2000, -2000, 4000, 4000))
        self.setScene(scene)
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setDragMode(QGraphicsView.DragMode.RubberBandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setMinimumSize(320, 240)
        self._statuses: dict[str, StatusItem] = {}
        self._edges: list[EdgeItem] = []
        self._gesture: _ConnectGesture | _MoveGesture | None = None
        self._selected: tuple[str, Any] = ("", None)
        self._rebuilding = False
        self._auto_fit = True
        scene.selectionChanged.connect(self._on_scene_selection_changed)

    # ------------------------------------------------------------ API
    def set_graph(
        self,
        statuses: Sequence[str],
        edges: Sequence[Edge],
        *,
        start: str = "",
        terminal: Iterable[str] = (),
        success: Iterable[str] = (),
        positions: dict[str, tuple[float, float]] | None = None,
    ) -> None:
        """Show this graph. Statuses keep their boxes (and selection) across
        calls; those without a position are placed by :func:`layered_layout`."""
        self._rebuilding = True
        try:
            self._set_graph(
                statuses, edges, start, set(terminal), set(success), positions or {}
            )
        finally:
            self._rebuilding = False
        self._on_scene_selection_changed()

    def _set_graph(
        self,
        statuses: Sequence[str],
        edges: Sequence[Edge],
        start: str,
        terminal: set[str],
        success: set[str],
        positions: dict[str, tuple[float, float]],
    ) -> None:
        scene = self.scene()
        selected_edge = self._selected[1] if self._selected[0] == "transition" else None
        for item in self._edges:
            scene.removeItem(item)
        self._edges = []
        wanted = list(dict.fromkeys(statuses))
        if any(e.source == ANY for e in edges):
            wanted.append(ANY)
        known = set(wanted)
        ghosts = [
            n
            for n in dict.fromkeys(x for e in edges for x in (e.source, e.target))
            if n not in known and n != ANY
        ]
        wanted += ghosts
        for name in list(self._statuses):
            if name not in wanted:
                scene.removeItem(self._statuses.pop(name))
        auto = layered_layout(
            [s for s in wanted if s != ANY],
            [(e.source, e.target) for e in edges],
            start,
            text_width(
                e.label
                for e in edges
                if e.source != e.target and ANY not in (e.source, e.target)
            ),
        )
        for name in wanted:
            status_item = self._statuses.get(name)
            if status_item is not None and status_item.ghost != (name in ghosts):
                scene.removeItem(self._statuses.pop(name))
                status_item = None
            if status_item is None:
                status_item = StatusItem(name, self, ghost=name in ghosts)
                self._statuses[name] = status_item
                scene.addItem(status_item)
            if name == ANY or name in ghosts:
                continue
            x, y = positions.get(name, auto.get(name, (0.0, 0.0)))
            if status_item.pos() != QPointF(x, y):
                status_item.setPos(x, y)
            status_item.set_flags(name == start, name in terminal, name in success)
        real = [i for i in self._statuses.values() if not i.pseudo]
        right = max((i.pos().x() for i in real), default=0.0)
        bottom = max((i.pos().y() for i in real), default=0.0)
        for k, name in enumerate(ghosts):
            self._statuses[name].setPos(right + H_GAP, bottom + k * V_GAP * 0.6)
        if ANY in self._statuses:
            if real:
                left = min(i.pos().x() for i in real)
                top = min(i.pos().y() for i in real)
            else:
                left = top = 0.0
            self._statuses[ANY].setPos(left, top - 0.95 * V_GAP)
        loops: dict[str, int] = {}
        pairs: dict[frozenset[str], list[EdgeItem]] = {}
        for edge in edges:
            source = self._statuses.get(edge.source)
            tgt_name = edge.source if edge.target == ANY else edge.target
            target = self._statuses.get(tgt_name)
            if source is None or target is None:
                continue  # names the canvas does not know: shown as a problem
            item = EdgeItem(edge, source, target)
            if source is target:
                k = loops.get(source.name, 0)
                loops[source.name] = k + 1
                item.loop = 42 + 26 * k
            else:
                pairs.setdefault(frozenset((source.name, target.name)), []).append(item)
            self._edges.append(item)
            scene.addItem(item)
        for group in pairs.values():
            n = len(group)
            first = group[0].source.name
            for k, item in enumerate(group):
                offset = (k - (n - 1) / 2) * 30 if n > 1 else 0.0
                # Edges both ways between two statuses bend to opposite sides.
                sign = 1 if item.source.name == first else -1
                if n > 1 and all(i.source.name == first for i in group):
                    sign = 1
                item.bend = offset * sign
                span = abs(item.source.pos().x() - item.target.pos().x())
                if n == 1 and span > 1.5 * H_GAP:
                    item.bend = 34.0  # skip over the statuses in between
        for item in self._edges:
            item.update_path()
            if item.edge.key == selected_edge and selected_edge is not None:
                item.setSelected(True)

    def status_names(self) -> list[str]:
        """The statuses shown (not the 'any status' box nor unknown names)."""
        return [n for n, i in self._statuses.items() if not i.pseudo]

    def status_item(self, name: str) -> StatusItem | None:
        return self._statuses.get(name)

    def edge_item(self, key: Any) -> EdgeItem | None:
        return next((e for e in self._edges if e.edge.key == key), None)

    def edge_items(self) -> list[EdgeItem]:
        return list(self._edges)

    def positions(self) -> dict[str, tuple[float, float]]:
        return {
            n: (i.pos().x(), i.pos().y())
            for n, i in self._statuses.items()
            if not i.pseudo
        }

    def status_at(self, scene_pos: QPointF) -> StatusItem | None:
        for item in self.scene().items(scene_pos):
            if isinstance(item, StatusItem):
                return item
        return None

    def select(self, kind: str, key: Any) -> None:
        """Select a status (by name) or a transition (by key); scroll to it."""
        self.scene().clearSelection()
        item: QGraphicsItem | None = None
        if kind == "status":
            item = self._statuses.get(key)
        elif kind == "transition":
            item = self.edge_item(key)
        if item is not None:
            item.setSelected(True)
            self.ensureVisible(item.sceneBoundingRect(), 40, 40)

    def selected(self) -> tuple[str, Any]:
        return self._selected

    def set_problems(
        self, statuses: dict[str, str], transitions: dict[Any, str]
    ) -> None:
        """Mark statuses and transitions in red with the message as tooltip."""
        for name, item in self._statuses.items():
            item.set_problem(statuses.get(name, ""))
        for edge_item in self._edges:
            edge_item.set_problem(transitions.get(edge_item.edge.key, ""))

    def request_fit(self) -> None:
        """Fit the graph now and again whenever the view is resized, until
        the user zooms."""
        self._auto_fit = True
        self.fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._auto_fit:
            self.fit()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._auto_fit:
            self.fit()

    def fit(self) -> None:
        # Status items reach NAME_SPILL past their boxes sideways for names
        # drawn zoomed out: that room is not the graph's.
        spill = 40 - NAME_SPILL
        rect = self.scene().itemsBoundingRect().adjusted(-spill, -40, spill, 40)
        if rect.isEmpty():
            return
        self.fit_rect(rect, 1.15)  # never blow small graphs up

    def user_zoomed(self) -> None:
        self._auto_fit = False  # the user's zoom holds until the next request

    # ---------------------------------------------------------- events
    def _on_status_item_moved(self, item: StatusItem) -> None:
        for edge in self._edges:
            if edge.source is item or edge.target is item:
                edge.update_path()

    def _on_scene_selection_changed(self) -> None:
        if self._rebuilding:
            return
        selected = self.scene().selectedItems()
        current: tuple[str, Any] = ("", None)
        for item in selected:
            if isinstance(item, StatusItem):
                current = ("status", item.name)
                break
            if isinstance(item, EdgeItem):
                current = ("transition", item.edge.key)
                break
        if current != self._selected:
            self._selected = current
            self.selection_changed.emit(*current)

    def drawBackground(self, painter: QPainter, rect: QRectF | QRect) -> None:
        background, grid, _ = CANVAS[theme_name(self.palette())]
        painter.fillRect(rect, QColor(background))
        step = 40
        painter.setPen(QPen(QColor(grid), 1))
        left = int(math.floor(rect.left() / step) * step)
        top = int(math.floor(rect.top() / step) * step)
        x = left
        while x < rect.right():
            painter.drawLine(QLineF(x, rect.top(), x, rect.bottom()))
            x += step
        y = top
        while y < rect.bottom():
            painter.drawLine(QLineF(rect.left(), y, rect.right(), y))
            y += step

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            pos = self.mapToScene(event.position().toPoint())
            item = self.status_at(pos)
            shift = bool(event.modifiers() & Qt.KeyboardModifier.ShiftModifier)
            if item is not None and not item.pseudo and (item.on_handle(pos) or shift):
                self._gesture = _ConnectGesture(self, item)
                event.accept()
                return
            self._gesture = _MoveGesture(self)
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if isinstance(self._gesture, _ConnectGesture):
            self._gesture.move(self.mapToScene(event.position().toPoint()))
            event.accept()
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        gesture, self._gesture = self._gesture, None
        if isinstance(gesture, _ConnectGesture):
            gesture.finish(self.mapToScene(event.position().toPoint()))
            event.accept()
            return
        super().mouseReleaseEvent(event)
        if isinstance(gesture, _MoveGesture):
            gesture.finish()

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        pos = self.mapToScene(event.position().toPoint())
        if self.itemAt(event.position().toPoint()) is None:
            self.status_add_requested.emit(pos.x(), pos.y())
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if (
            event.key() in (Qt.Key.Key_Delete, Qt.Key.Key_Backspace)
            and self._selected[0]
        ):
            self.delete_requested.emit()
            event.accept()
            return
        super().keyPressEvent(event)


__all__ = [
    "ANY",
    "Edge",
    "EdgeItem",
    "StateMachineEditor",
    "StatusItem",
    "circular_layout",
    "layered_layout",
    "text_width",
]
