"""A sortable table of records (dicts) with declarative columns and an
empty-state message, for lists of runs, models, environments and flows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QItemSelection,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QStackedLayout,
    QTableView,
    QWidget,
)

Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class Column:
    title: str
    value: Callable[[dict[str, Any]], Any]
    """What the column shows (and sorts by) for a record."""
    text: Callable[[Any], str] = str
    """How the value reads; ignored when ``display`` is given."""
    display: Callable[[dict[str, Any]], str] | None = None
    """Text built from the whole record, when the value alone is not enough."""
    color: Callable[[dict[str, Any]], str | None] | None = None
    tooltip: Callable[[dict[str, Any]], str] | None = None


class RecordModel(QAbstractTableModel):
    def __init__(self, columns: Sequence[Column], key: str = "id") -> None:
        super().__init__()
        self.columns = list(columns)
        self.key = key
        self.records: list[dict[str, Any]] = []
        self._rows: dict[str, int] = {}

    def set_records(self, records: Sequence[dict[str, Any]]) -> None:
        self.beginResetModel()
        self.records = list(records)
        self._rows = {str(r.get(self.key)): i for i, r in enumerate(self.records)}
        self.endResetModel()

    def update_record(self, record: dict[str, Any]) -> None:
        """Replace one record in place (or append it) and repaint its row."""
        key = str(record.get(self.key))
        row = self._rows.get(key)
        if row is None:
            self.beginInsertRows(QModelIndex(), len(self.records), len(self.records))
            self._rows[key] = len(self.records)
            self.records.append(record)
            self.endInsertRows()
            return
        self.records[row] = record
        self.dataChanged.emit(
            self.index(row, 0), self.index(row, len(self.columns) - 1)
        )

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.records)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.columns)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = 0
    ) -> Any:
        if (
            orientation == Qt.Orientation.Horizontal
            and role == Qt.ItemDataRole.DisplayRole
        ):
            return self.columns[section].title
        return None

    def sort_key(self, row: int, column: int) -> Any:
        """What a cell sorts by (the ``UserRole`` data)."""
        try:
            value = self.columns[column].value(self.records[row])
        except (KeyError, TypeError, ValueError):
            return None
        return value if isinstance(value, int | float | str) else str(value)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        record = self.records[index.row()]
        col = self.columns[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            try:
                if col.display is not None:
                    return col.display(record)
                return col.text(col.value(record))
            except (KeyError, TypeError, ValueError):
                return ""
        if role == Qt.ItemDataRole.UserRole:
            return self.sort_key(index.row(), index.column())
        if role == Qt.ItemDataRole.ForegroundRole and col.color is not None:
            color = col.color(record)
            return QColor(color) if color else None
        if role == Qt.ItemDataRole.ToolTipRole and col.tooltip is not None:
            return col.tooltip(record)
        return None


class _SortProxy(QSortFilterProxyModel):
    def lessThan(self, left: Index, right: Index) -> bool:
        # straight from the records: a thousand rows sort without a trip
        # through QModelIndex.data per comparison
        model = self.sourceModel()
        if isinstance(model, RecordModel):
            a = model.sort_key(left.row(), left.column())
            b = model.sort_key(right.row(), right.column())
        else:
            a = left.data(Qt.ItemDataRole.UserRole)
            b = right.data(Qt.ItemDataRole.UserRole)
        if a is None or b is None:
            return b is not None
        try:
            return bool(a < b)
        except TypeError:
            return str(a) < str(b)


class RecordTable(QWidget):
    """Shows records; emits ``selection_changed(list of keys)`` and
    ``activation_requested(key)`` on double-click / Enter."""

    selection_changed = Signal(list)
    activation_requested = Signal(str)

    def __init__(
        self,
        columns: Sequence[Column],
        empty_text: str = "Nothing here yet.",
        key: str = "id",
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.model = RecordModel(columns, key)
        self._proxy = _SortProxy()
        self._proxy.setSourceModel(self.model)
        self.view = QTableView()
        self.view.setModel(self._proxy)
        self.view.setSortingEnabled(True)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().hide()
        header = self.view.horizontalHeader()
        header.setStretchLastSection(True)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.view.selectionModel().selectionChanged.connect(
            self._on_view_selection_changed
        )
        self.view.activated.connect(self._on_view_activated)
        self.empty_label = QLabel(empty_text, alignment=Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        self.empty_label.setStyleSheet("color: palette(mid); padding: 24px;")
        self._stack = QStackedLayout(self)
        self._stack.addWidget(self.view)
        self._stack.addWidget(self.empty_label)
        self._refresh_empty()

    def set_records(self, records: Sequence[dict[str, Any]]) -> None:
        keys = self.selected_keys()
        self.model.set_records(records)
        self.view.resizeColumnsToContents()
        self._refresh_empty()
        self.select_keys(keys)

    def update_record(self, record: dict[str, Any]) -> None:
        self.model.update_record(record)
        self._refresh_empty()

    def set_empty_text(self, text: str) -> None:
        self.empty_label.setText(text)

    def selected_keys(self) -> list[str]:
        rows = {
            self._proxy.mapToSource(i).row()
            for i in self.view.selectionModel().selectedRows()
        }
        return [str(self.model.records[r].get(self.model.key)) for r in sorted(rows)]

    def select_keys(self, keys: Sequence[str]) -> None:
        """Select exactly these rows, in one change: ``selection_changed``
        fires once (not once per row and once for the clearing), and not at
        all when they are selected already."""
        wanted = {str(k) for k in keys}
        if set(self.selected_keys()) == wanted:
            return
        rows = QItemSelection()
        for r, record in enumerate(self.model.records):
            if str(record.get(self.model.key)) in wanted:
                proxy_index = self._proxy.mapFromSource(self.model.index(r, 0))
                rows.select(proxy_index, proxy_index)
        selection = self.view.selectionModel()
        selection.select(
            rows,
            selection.SelectionFlag.ClearAndSelect | selection.SelectionFlag.Rows,
        )

    def _refresh_empty(self) -> None:
        self._stack.setCurrentWidget(
            self.empty_label if not self.model.records else self.view
        )

    def _on_view_selection_changed(self, *_: object) -> None:
        self.selection_changed.emit(self.selected_keys())

    def _on_view_activated(self, index: QModelIndex) -> None:
        record = self.model.records[self._proxy.mapToSource(index).row()]
        self.activation_requested.emit(str(record.get(self.model.key)))
