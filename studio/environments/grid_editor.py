"""The editor of a grid env: the cells painted on a grid, its size, and
the rewards and limits of its spec."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import (
    QFormLayout,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from studio.environments import commands as cmd
from studio.environments.fields import FieldForm
from studio.environments.kind_editor import EditorContext, KindEditor, ProblemMarks
from studio.state.env_design import Target
from widgets.fit import ScrollStrip, scroll_area
from widgets.grid_painter import GridPainter, GridPalette

GRID_FIELDS: list[tuple[str, dict[str, Any]]] = [
    (
        "grid.slip",
        {
            "name": "slip",
            "type": "float",
            "default": 0.0,
            "min": 0.0,
            "max": 1.0,
            "help": "Probability that a move goes to a perpendicular side.",
            "title": "Slip probability",
        },
    ),
    (
        "grid.max_steps",
        {
            "name": "max_steps",
            "type": "int",
            "default": 100,
            "min": 1,
            "help": "Steps before an episode is cut off.",
            "title": "Max steps",
        },
    ),
    (
        "grid.rewards.per_step",
        {"name": "per_step", "type": "float", "default": 0.0, "title": "Per step"},
    ),
    (
        "grid.rewards.goal",
        {"name": "goal", "type": "float", "default": 1.0, "title": "Goal"},
    ),
    (
        "grid.rewards.trap",
        {"name": "trap", "type": "float", "default": -1.0, "title": "Trap"},
    ),
    (
        "grid.rewards.wall_bump",
        {"name": "wall_bump", "type": "float", "default": 0.0, "title": "Wall bump"},
    ),
]


class GridEditor(KindEditor):
    """The grid kind's page."""

    def __init__(self, context: EditorContext, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        self.painter = GridPainter()
        self.painter.stroke_finished.connect(self._on_stroke_finished)
        self.cell_palette = GridPalette(self.painter)
        self.rows = QSpinBox(minimum=1, maximum=256)
        self.cols = QSpinBox(minimum=1, maximum=256)
        self.rows.editingFinished.connect(self._on_size_edited)
        self.cols.editingFinished.connect(self._on_size_edited)
        self.form = FieldForm(GRID_FIELDS)
        self.bind_form(self.form)
        side = QWidget()
        form = QFormLayout(side)
        form.addRow("Rows", self.rows)
        form.addRow("Columns", self.cols)
        form.addRow(self.form)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(ScrollStrip(self.cell_palette))
        left_layout.addWidget(self.painter, 1)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(scroll_area(side))
        splitter.setStretchFactor(0, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)

    def refresh(self) -> None:
        """Bring the page up to date with the spec (the form too unless the
        edit came from it)."""
        rows, cols = self._model.grid_size()
        self.painter.set_grid(rows, cols, self._model.grid_cells())
        for spin, value in ((self.rows, rows), (self.cols, cols)):
            with QSignalBlocker(spin):
                spin.setValue(value)
        if self.context.source() is not self.form:
            self.form.load(self._model)

    def show_problems(self, marks: ProblemMarks) -> None:
        self.painter.set_problem_cells(marks.cells)
        self.form.mark(marks.fields)

    def focus_problem(self, target: Target) -> None:
        if target.kind == "cell":
            self.painter.setFocus()
        elif target.kind == "field":
            self.form.focus(target.key)

    def _on_stroke_finished(self, changes: list[Any]) -> None:
        self.push(cmd.PaintCells(self._model, changes))

    def _on_size_edited(self) -> None:
        rows, cols = self.rows.value(), self.cols.value()
        if (rows, cols) != self._model.grid_size():
            self.push(cmd.ResizeGrid(self._model, rows, cols))


__all__ = ["GRID_FIELDS", "GridEditor"]
