"""A table editor for a list of records (e.g. the stages of a curriculum).

Its columns are field schemas (:mod:`widgets.param_form`): ``int``,
``float``, ``str``, ``int_list`` (typed as ``3, 4``) as text cells, ``bool``
as a check box. An empty cell is the column's default, and a record leaves
out the columns at their default, so ``{}`` is a row of defaults. Rows are
added, removed and moved with the buttons under the table. Every edit is
checked: a bad cell (or fewer rows than ``min_rows``) shows one sentence and
``value()`` keeps the last good list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractScrollArea,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from widgets.form_values import check_value

BAD_CELL = QColor(214, 39, 40, 90)
"""A bad cell's background: translucent red, readable on light and dark."""


def cell_text(column: Mapping[str, Any], value: Any) -> str:
    """How a value reads in a text cell (None: empty)."""
    if value is None:
        return ""
    if column.get("type") == "int_list":
        return ", ".join(str(v) for v in value)
    return str(value)


def two_lines(title: str, longest: int = 12) -> str:
    """A long column title broken at the space nearest its middle."""
    if len(title) <= longest or " " not in title:
        return title
    spaces = [i for i, ch in enumerate(title) if ch == " "]
    cut = min(spaces, key=lambda i: abs(i - len(title) / 2))
    return f"{title[:cut]}\n{title[cut + 1 :]}"


class RowsEditor(QWidget):
    """Emits ``value_changed(list)`` with every good edit and
    ``problem_changed(str)`` when the sentence saying what is wrong changes
    (empty: nothing)."""

    value_changed = Signal(list)
    problem_changed = Signal(str)

    def __init__(
        self,
        columns: Sequence[Mapping[str, Any]],
        *,
        title: str = "Rows",
        min_rows: int = 0,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._columns = [dict(c) for c in columns]
        self._title = title
        self._min_rows = min_rows
        self._value: list[dict[str, Any]] = []
        self._problem = ""
        self._filling = False
        self.table = QTableWidget(0, len(self._columns))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        # As tall as its rows (a few stages), not a fixed empty box.
        self.table.setSizeAdjustPolicy(
            QAbstractScrollArea.SizeAdjustPolicy.AdjustToContents
        )
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        for i, column in enumerate(self._columns):
            name = column.get("title") or column["name"]
            unit = column.get("unit", "")
            unit = f" ({unit})" if unit and not name.lower().endswith(unit) else ""
            item = QTableWidgetItem(two_lines(name + unit))
            item.setToolTip(column.get("help", ""))
            self.table.setHorizontalHeaderItem(i, item)
        self.table.itemChanged.connect(self._on_table_item_changed)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        self.add_button = _tool_button("Add", "Add a row at the end")
        self.remove_button = _tool_button("Remove", "Remove the row")
        self.up_button = _tool_button("Up", "Move the row up")
        self.down_button = _tool_button("Down", "Move the row down")
        self.add_button.clicked.connect(self._on_add_clicked)
        self.remove_button.clicked.connect(self._on_remove_clicked)
        self.up_button.clicked.connect(lambda: self._move(-1))
        self.down_button.clicked.connect(lambda: self._move(1))
        for button in (
            self.add_button,
            self.remove_button,
            self.up_button,
            self.down_button,
        ):
            buttons.addWidget(button)
        buttons.addStretch(1)
        hint = QLabel("An empty cell is the default.")
        hint.setStyleSheet("color: palette(mid);")
        buttons.addWidget(hint)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table)
        layout.addLayout(buttons)
        self._update_buttons()

    # ------------------------------------------------------------ API
    def value(self) -> list[dict[str, Any]]:
        """The last good list of records."""
        return [dict(r) for r in self._value]

    def problem(self) -> str:
        return self._problem

    def set_value(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Show ``rows``; a key no column has is a problem (and is dropped)."""
        known = [c["name"] for c in self._columns]
        unknown = ""
        for i, row in enumerate(rows):
            extra = [k for k in row if k not in known]
            if extra and not unknown:
                unknown = (
                    f"{extra[0]!r} in row {i + 1} is not a column of {self._title}; "
                    f"it has {', '.join(known)}."
                )
        self._filling = True
        self.table.setRowCount(0)
        for row in rows:
            self._append(row)
        self._filling = False
        self._update_buttons()
        self._read(unknown)

    def select_row(self, row: int) -> None:
        self.table.selectRow(row)

    # ------------------------------------------------------------ rows
    def _append(self, row: Mapping[str, Any]) -> None:
        r = self.table.rowCount()
        self.table.insertRow(r)
        for c, column in enumerate(self._columns):
            value = row.get(column["name"], column.get("default"))
            item = QTableWidgetItem()
            item.setToolTip(column.get("help", ""))
            if column.get("type") == "bool":
                item.setFlags(
                    Qt.ItemFlag.ItemIsEnabled
                    | Qt.ItemFlag.ItemIsSelectable
                    | Qt.ItemFlag.ItemIsUserCheckable
                )
                item.setCheckState(
                    Qt.CheckState.Checked if value else Qt.CheckState.Unchecked
                )
            else:
                item.setText(cell_text(column, value))
            self.table.setItem(r, c, item)

    def _row_cells(self, r: int) -> list[QTableWidgetItem]:
        return [
            _present(self.table.item(r, c), r, c) for c in range(len(self._columns))
        ]

    def _take_row(self, r: int) -> list[QTableWidgetItem]:
        return [
            _present(self.table.takeItem(r, c), r, c) for c in range(len(self._columns))
        ]

    def _on_add_clicked(self) -> None:
        self._filling = True
        self._append({})
        self._filling = False
        self.table.selectRow(self.table.rowCount() - 1)
        self._read()

    def _on_remove_clicked(self) -> None:
        r = self.table.currentRow()
        if r < 0:
            return
        self.table.removeRow(r)
        self._update_buttons()
        self._read()

    def _move(self, step: int) -> None:
        r = self.table.currentRow()
        other = r + step
        if r < 0 or not 0 <= other < self.table.rowCount():
            return
        self._filling = True
        mine, theirs = self._take_row(r), self._take_row(other)
        for c in range(len(self._columns)):
            self.table.setItem(r, c, theirs[c])
            self.table.setItem(other, c, mine[c])
        self._filling = False
        self.table.selectRow(other)
        self._read()

    def _update_buttons(self) -> None:
        r = self.table.currentRow() if self.table.selectedItems() else -1
        self.remove_button.setEnabled(r >= 0)
        self.up_button.setEnabled(r > 0)
        self.down_button.setEnabled(0 <= r < self.table.rowCount() - 1)

    # ---------------------------------------------------------- checking
    def _on_table_item_changed(self, _item: QTableWidgetItem) -> None:
        if not self._filling:
            self._read()

    def _read(self, problem: str = "") -> None:
        """Parse every cell; keep the rows when all are good."""
        rows: list[dict[str, Any]] = []
        self._filling = True
        for r in range(self.table.rowCount()):
            record: dict[str, Any] = {}
            for column, item in zip(self._columns, self._row_cells(r), strict=True):
                value, error = self._cell_value(column, item, r)
                item.setBackground(QBrush(BAD_CELL) if error else QBrush())
                if error:
                    problem = problem or error
                elif value != column.get("default"):
                    record[column["name"]] = value
            rows.append(record)
        self._filling = False
        if not problem and len(rows) < self._min_rows:
            problem = (
                f"{self._title} needs at least {self._min_rows} row"
                f"{'s' if self._min_rows > 1 else ''}; add one."
            )
        if problem != self._problem:
            self._problem = problem
            self.problem_changed.emit(problem)
        if not problem and rows != self._value:
            self._value = rows
            self.value_changed.emit(self.value())

    def _cell_value(
        self, column: dict[str, Any], item: QTableWidgetItem, r: int
    ) -> tuple[Any, str]:
        if column.get("type") == "bool":
            return item.checkState() == Qt.CheckState.Checked, ""
        if not item.text().strip():
            return column.get("default"), ""
        name = column.get("title") or column["name"]
        return check_value({**column, "title": f"{name} in row {r + 1}"}, item.text())


def _tool_button(text: str, tip: str) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setToolTip(tip)
    return button


def _present(item: QTableWidgetItem | None, r: int, c: int) -> QTableWidgetItem:
    """The cell's item: ``_append`` gives every cell one."""
    if item is None:
        raise LookupError(f"Row {r + 1}, column {c + 1} of the table has no item.")
    return item
