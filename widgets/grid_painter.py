"""A painter for grid worlds: walls, start, goals, traps and cell rewards.

:class:`GridPainter` shows a grid of cells, each ``(kind, reward, once)``
with kind one of ``empty``, ``wall``, ``start``, ``goal``, ``trap``, reward a
number or None and once whether the reward is paid only the first time the
cell is entered in an episode (a coin, drawn with a ring). Press and drag
paints with the current tool; the whole stroke is reported once, on
release, as ``stroke_finished([(row, col, old, new), ...])`` so the caller
can make it one undo step. The painter shows the stroke as it goes but
keeps its cells only until the caller sets the grid again
(:meth:`GridPainter.set_grid`). There is one start: painting it moves it
(the old start cell is part of the stroke).

:class:`GridPalette` is a row of tool buttons and the reward tool's value
and "once" box.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QEvent, QPoint, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QHelpEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPen,
)
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QToolTip,
    QWidget,
)

from widgets.theme import CANVAS, theme_name

Cell = tuple[str, float | None, bool]
"""``(kind, reward, once)``; the same shape as ``studio.state.env_design.Cell``
(this module may not import it), so cells pass between them as they are."""
EMPTY: Cell = ("empty", None, False)
TOOLS = ("wall", "start", "goal", "trap", "reward", "erase")
FILL = {
    "empty": "#ffffff",
    "wall": "#3d4654",
    "start": "#2a7de1",
    "goal": "#2e9e3e",
    "trap": "#c8413a",
}
SYMBOL = {"start": "S", "goal": "G", "trap": "T"}
COIN = "#d99a00"
"""The ring of a cell whose reward is paid once an episode."""
ONCE_TIP = (
    "Paid the first time the cell is entered in an episode, like a coin; "
    "clear it to pay each time the cell is entered."
)
KIND_TEXT = {
    "empty": "Empty",
    "wall": "Wall: it cannot be entered",
    "start": "Start: each episode begins here",
    "goal": "Goal: entering it ends the episode with success",
    "trap": "Trap: entering it ends the episode with the trap's penalty",
}


def describe_cell(cell: Cell) -> str:
    """What a cell is and what entering it pays, in a sentence or two (its
    hover text)."""
    kind, reward, once = cell
    text = KIND_TEXT[kind] + "."
    if reward is not None:
        when = (
            "the first time it is entered in an episode"
            if once
            else ("each time it is entered")
        )
        text += f" Pays {reward:+g} {when}."
    return text


TOOL_TEXT = {
    "wall": "Wall",
    "start": "Start",
    "goal": "Goal",
    "trap": "Trap",
    "reward": "Reward",
    "erase": "Erase",
}


class GridPainter(QWidget):
    stroke_finished = Signal(list)
    """``[(row, col, old_cell, new_cell), ...]`` — one painted stroke."""
    cell_hovered = Signal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows = 5
        self.cols = 5
        self._cells: dict[tuple[int, int], Cell] = {}
        self._problems: dict[tuple[int, int], str] = {}
        self.tool = "wall"
        self.reward = 0.1
        self.once = False
        self._stroke: dict[tuple[int, int], tuple[Cell, Cell]] | None = None
        self._last: tuple[int, int] | None = None
        self.setMouseTracking(True)
        self.setMinimumSize(200, 200)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    # ------------------------------------------------------------ API
    def set_grid(
        self, rows: int, cols: int, cells: Mapping[tuple[int, int], Cell]
    ) -> None:
        """Show a ``rows`` x ``cols`` grid; ``cells`` lists the non-empty ones."""
        self.rows, self.cols = max(1, rows), max(1, cols)
        self._cells = {
            k: v for k, v in cells.items() if k[0] < self.rows and k[1] < self.cols
        }
        self.update()

    def cell(self, row: int, col: int) -> Cell:
        return self._cells.get((row, col), EMPTY)

    def set_tool(
        self, tool: str, reward: float | None = None, once: bool | None = None
    ) -> None:
        """Paint with ``tool``; ``reward`` and ``once`` (when given) are what
        the reward tool paints."""
        if tool not in TOOLS:
            raise ValueError(
                f"Unknown tool {tool!r}; choose one of {', '.join(TOOLS)}."
            )
        self.tool = tool
        if reward is not None:
            self.reward = float(reward)
        if once is not None:
            self.once = bool(once)

    def set_problem_cells(self, problems: Mapping[tuple[int, int], str]) -> None:
        """Outline cells in red; the message shows, under the cell's
        description, when the mouse is over one."""
        self._problems = dict(problems)
        self.update()

    def hover_text(self, row: int, col: int) -> str:
        """The cell's description, and its problem when it has one."""
        text = f"Row {row}, column {col}. {describe_cell(self.cell(row, col))}"
        problem = self._problems.get((row, col))
        return f"{text}\n{problem}" if problem else text

    def cell_rect(self, row: int, col: int) -> QRectF:
        size, x0, y0 = self._geometry()
        return QRectF(x0 + col * size, y0 + row * size, size, size)

    def cell_center(self, row: int, col: int) -> QPoint:
        return self.cell_rect(row, col).center().toPoint()

    def cell_at(self, pos: QPoint) -> tuple[int, int] | None:
        size, x0, y0 = self._geometry()
        col = int((pos.x() - x0) // size)
        row = int((pos.y() - y0) // size)
        if 0 <= row < self.rows and 0 <= col < self.cols:
            return row, col
        return None

    def sizeHint(self) -> QSize:
        return QSize(min(900, 36 * self.cols + 20), min(700, 36 * self.rows + 20))

    # ---------------------------------------------------------- painting
    def _geometry(self) -> tuple[float, float, float]:
        margin = 10
        size = max(
            4.0,
            min(
                (self.width() - 2 * margin) / self.cols,
                (self.height() - 2 * margin) / self.rows,
                64.0,
            ),
        )
        x0 = (self.width() - size * self.cols) / 2
        y0 = (self.height() - size * self.rows) / 2
        return size, x0, y0

    def _painted(self, row: int, col: int, old: Cell) -> Cell:
        kind, reward, once = old
        if self.tool == "erase":
            return EMPTY
        if self.tool == "reward":
            return ("empty" if kind == "wall" else kind, self.reward, self.once)
        if self.tool == "wall":
            return ("wall", None, False)
        return (self.tool, reward, once)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor(CANVAS[theme_name(self.palette())][0]))
        size, _, _ = self._geometry()
        font = QFont(self.font())
        font.setBold(True)
        font.setPixelSize(max(8, int(size * 0.42)))
        small = QFont(self.font())
        small.setPixelSize(max(7, int(size * 0.26)))
        for row in range(self.rows):
            for col in range(self.cols):
                kind, reward, once = self.cell(row, col)
                rect = self.cell_rect(row, col)
                painter.setPen(QPen(QColor("#cfd6de"), 1))
                painter.setBrush(QColor(FILL[kind]))
                painter.drawRect(rect)
                if reward is not None and kind == "empty":
                    painter.setPen(Qt.PenStyle.NoPen)
                    painter.setBrush(QColor(106, 79, 179, 40))
                    painter.drawRect(rect.adjusted(1, 1, -1, -1))
                if once and reward is not None:
                    # A coin: a ring inside the cell, around the symbol if any.
                    ring = max(1.5, size * 0.07)
                    inset = size * 0.16 + ring / 2
                    painter.setPen(QPen(QColor(COIN), ring))
                    painter.setBrush(Qt.BrushStyle.NoBrush)
                    painter.drawEllipse(rect.adjusted(inset, inset, -inset, -inset))
                if kind in SYMBOL:
                    painter.setPen(QColor("white"))
                    painter.setFont(font)
                    painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, SYMBOL[kind])
                if reward is not None:
                    painter.setPen(QColor("white" if kind != "empty" else "#6a4fb3"))
                    painter.setFont(small)
                    painter.drawText(
                        rect.adjusted(2, 1, -2, -1),
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom,
                        f"{reward:+g}",
                    )
                if (row, col) in self._problems:
                    painter.setPen(QPen(QColor("#d62728"), 3))
                    painter.setBrush(Qt.BrushStyle.NoBrush)
                    painter.drawRect(rect.adjusted(1.5, 1.5, -1.5, -1.5))
        painter.end()

    # ------------------------------------------------------------ mouse
    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            cell = self.cell_at(event.pos())
            if cell is None or self._stroke is not None:  # none under the brush
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), self.hover_text(*cell), self)
            return True
        return super().event(event)

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        cell = self.cell_at(event.position().toPoint())
        if cell is None:
            return
        self._stroke = {}
        self._last = cell
        self._paint_cell(*cell)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        cell = self.cell_at(event.position().toPoint())
        if cell is not None:
            self.cell_hovered.emit(*cell)
            if cell in self._problems and self._stroke is None:  # not mid-stroke
                # At once, not after the hover delay: the outline asks why.
                QToolTip.showText(
                    event.globalPosition().toPoint(), self.hover_text(*cell), self
                )
        if self._stroke is None or cell is None or cell == self._last:
            return
        if self.tool != "start":
            for r, c in _line(self._last or cell, cell):
                self._paint_cell(r, c)
        else:
            self._paint_cell(*cell)
        self._last = cell

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() != Qt.MouseButton.LeftButton or self._stroke is None:
            return
        stroke, self._stroke = self._stroke, None
        changes = [
            (r, c, old, new) for (r, c), (old, new) in stroke.items() if old != new
        ]
        if changes:
            self.stroke_finished.emit(changes)

    def _paint_cell(self, row: int, col: int) -> None:
        assert self._stroke is not None
        old = self.cell(row, col)
        new = self._painted(row, col, old)
        if self.tool == "start":
            for key, (kind, reward, once) in list(self._cells.items()):
                if kind == "start" and key != (row, col):
                    self._record(key, (kind, reward, once), ("empty", reward, once))
        self._record((row, col), old, new)
        self.update()

    def _record(self, key: tuple[int, int], old: Cell, new: Cell) -> None:
        assert self._stroke is not None
        first = self._stroke.get(key, (old, new))[0]
        self._stroke[key] = (first, new)
        if new == EMPTY:
            self._cells.pop(key, None)
        else:
            self._cells[key] = new


def _line(a: tuple[int, int], b: tuple[int, int]) -> list[tuple[int, int]]:
    """Cells from ``a`` to ``b`` (Bresenham), so fast drags leave no gaps."""
    (r0, c0), (r1, c1) = a, b
    dr, dc = abs(r1 - r0), abs(c1 - c0)
    sr, sc = (1 if r1 > r0 else -1), (1 if c1 > c0 else -1)
    err = dc - dr
    out = []
    r, c = r0, c0
    while True:
        out.append((r, c))
        if (r, c) == (r1, c1):
            return out
        e2 = 2 * err
        if e2 > -dr:
            err -= dr
            c += sc
        if e2 < dc:
            err += dc
            r += sr


class GridPalette(QWidget):
    """Tool buttons (wall, start, goal, trap, reward, erase), the reward
    value and its "once" box; drives a :class:`GridPainter`."""

    tool_changed = Signal(str)

    def __init__(self, painter: GridPainter, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.painter = painter
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.group = QButtonGroup(self)
        self.buttons: dict[str, QToolButton] = {}
        for tool in TOOLS:
            button = QToolButton()
            button.setText(TOOL_TEXT[tool])
            button.setCheckable(True)
            color = FILL.get(tool, "#6a4fb3" if tool == "reward" else "#ffffff")
            button.setStyleSheet(
                f"QToolButton {{ border-left: 6px solid {color}; padding: 3px 8px; }}"
                "QToolButton:checked { background: #dbe7f7; }"
            )
            button.setToolTip(
                {
                    "wall": "Paint walls.",
                    "start": "Place the start (there is one).",
                    "goal": "Paint goal cells (the episode ends with success).",
                    "trap": "Paint traps (the episode ends with a penalty).",
                    "reward": "Give cells a reward added each time they are "
                    "entered, or the first time in an episode with 'once' ticked.",
                    "erase": "Clear cells.",
                }[tool]
            )
            self.group.addButton(button)
            self.buttons[tool] = button
            button.clicked.connect(lambda *_, t=tool: self._on_tool_clicked(t))
            layout.addWidget(button)
        layout.addWidget(QLabel("reward"))
        self.reward = QDoubleSpinBox(
            minimum=-100.0, maximum=100.0, decimals=3, singleStep=0.1
        )
        self.reward.setValue(painter.reward)
        self.reward.valueChanged.connect(self._on_reward_changed)
        layout.addWidget(self.reward)
        self.once = QCheckBox("once")
        self.once.setChecked(painter.once)
        self.once.setToolTip(ONCE_TIP)
        self.once.toggled.connect(self._on_once_toggled)
        layout.addWidget(self.once)
        layout.addStretch(1)
        self.buttons[painter.tool].setChecked(True)

    def _on_tool_clicked(self, tool: str) -> None:
        self.painter.set_tool(tool)
        self.tool_changed.emit(tool)

    def _on_reward_changed(self, value: float) -> None:
        self.painter.set_tool(self.painter.tool, value)

    def _on_once_toggled(self, checked: bool) -> None:
        self.painter.set_tool(self.painter.tool, once=checked)


__all__ = ["EMPTY", "TOOLS", "Cell", "GridPainter", "GridPalette"]
