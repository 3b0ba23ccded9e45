"""A sortable table of records (dicts) with declarative columns and an
empty-state message, for lists of runs, models, environments and flows;
:meth:`RecordTable.set_filter` shows only the records a predicate passes
(``widgets.record_filter`` makes one from a search box and facets)."""

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
    """The records as rows, top to bottom: in the order given, or in the
    order of the column sorted by (:meth:`sort`)."""

    def __init__(self, columns: Sequence[Column], key: str = "id") -> None:
        super().__init__()
        self.columns = list(columns)
        self.key = key
        self.records: list[dict[str, Any]] = []
        self._rows: dict[str, int] = {}
        self._given: dict[str, int] = {}  # key -> place in the order given
        # column -> every row's sort key, computed once per change.
        self._sort_keys: dict[int, list[Any]] = {}
        self.sorted_by: tuple[int, Qt.SortOrder] | None = None
        """The column and order the rows are in (None: as given)."""

    def set_records(self, records: Sequence[dict[str, Any]]) -> None:
        self.beginResetModel()
        self.records = list(records)
        self._given = {str(r.get(self.key)): i for i, r in enumerate(self.records)}
        self._sort_keys.clear()
        order = self._sorted_order()
        if order is not None:
            self._reorder(order)
        self._rows = {str(r.get(self.key)): i for i, r in enumerate(self.records)}
        self.endResetModel()

    def update_record(self, record: dict[str, Any]) -> None:
        """Replace one record in place (or add it) and repaint its row."""
        key = str(record.get(self.key))
        row = self._rows.get(key)
        if row is None:
            row = len(self.records)
            self.beginInsertRows(QModelIndex(), row, row)
            self._rows[key] = row
            self._given[key] = len(self._given)
            self.records.append(record)
            for column, keys in self._sort_keys.items():
                keys.append(self._sort_key_of(record, column))
            self.endInsertRows()
            self._resort()
            return
        self.records[row] = record
        for column, keys in self._sort_keys.items():
            keys[row] = self._sort_key_of(record, column)
        self.dataChanged.emit(
            self.index(row, 0), self.index(row, len(self.columns) - 1)
        )
        if self.sorted_by is not None and not self._in_order(row):
            self._resort()

    # ------------------------------------------------------------ sorting
    def sort(
        self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder
    ) -> None:
        """Keep the rows sorted by ``column``. Python's ``sorted`` on cached
        keys sorts them (a view sorting through a proxy calls Python once
        per comparison: 0.3 s for 3,000 runs, again on each filter)."""
        self.sorted_by = (column, order) if 0 <= column < len(self.columns) else None
        self._resort()

    def sort_key(self, row: int, column: int) -> Any:
        """What a cell sorts by (the ``UserRole`` data)."""
        return self._keys(column)[row]

    def _keys(self, column: int) -> list[Any]:
        keys = self._sort_keys.get(column)
        if keys is None:
            keys = [self._sort_key_of(r, column) for r in self.records]
            self._sort_keys[column] = keys
        return keys

    def _sort_key_of(self, record: dict[str, Any], column: int) -> Any:
        try:
            value = self.columns[column].value(record)
        except (KeyError, TypeError, ValueError):
            return None
        return value if isinstance(value, int | float | str) else str(value)

    def _sorted_order(self) -> list[int] | None:
        """The rows in sorted order (None when they are in it already)."""
        if self.sorted_by is None:
            return None
        column, order = self.sorted_by
        rows = _order(self._keys(column), order)
        return None if rows == list(range(len(rows))) else rows

    def _reorder(self, order: list[int]) -> None:
        self.records = [self.records[i] for i in order]
        for column, keys in self._sort_keys.items():
            self._sort_keys[column] = [keys[i] for i in order]

    def _in_order(self, row: int) -> bool:
        """Whether ``row`` sits where the sort puts it (beside its neighbours)."""
        assert self.sorted_by is not None
        column, order = self.sorted_by
        keys = self._keys(column)
        near = [keys[r] for r in (row - 1, row, row + 1) if 0 <= r < len(keys)]
        return _order(near, order) == list(range(len(near)))

    def _resort(self) -> None:
        order = self._sorted_order()
        if order is None:
            return
        self.layoutAboutToBeChanged.emit()
        new_row = [0] * len(order)
        for new, old in enumerate(order):
            new_row[old] = new
        self._reorder(order)
        self._rows = {str(r.get(self.key)): i for i, r in enumerate(self.records)}
        before = self.persistentIndexList()
        after = [self.index(new_row[i.row()], i.column()) for i in before]
        self.changePersistentIndexList(before, after)
        self.layoutChanged.emit()

    def row_of(self, key: str) -> int | None:
        return self._rows.get(key)

    def given_place(self, key: str) -> int:
        """Where the record of ``key`` came in the records given (and added)."""
        return self._given.get(key, len(self._given))

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
    def __init__(self) -> None:
        super().__init__()
        self.accept: Callable[[dict[str, Any]], bool] | None = None
        """Shows a record when it returns True; None shows every record."""

    def set_accept(self, accept: Callable[[dict[str, Any]], bool] | None) -> None:
        if hasattr(self, "endFilterChange"):  # Qt 6.10 deprecates invalidateFilter
            self.beginFilterChange()
            self.accept = accept
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:
            self.accept = accept
            self.invalidateFilter()

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:
        model = self.sourceModel()
        if self.accept is None or not isinstance(model, RecordModel):
            return True
        return self.accept(model.records[source_row])

    def sort(
        self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder
    ) -> None:
        # The records keep their order themselves (RecordModel.sort); this
        # proxy only filters, so it maps rows in the model's order.
        model = self.sourceModel()
        if isinstance(model, RecordModel):
            model.sort(column, order)
        else:
            super().sort(column, order)


def _order(keys: Sequence[Any], order: Qt.SortOrder) -> list[int]:
    """The positions of ``keys`` sorted (None first when ascending; keys of
    types that do not compare sort as text)."""

    def key(i: int) -> tuple[int, Any]:
        return (0, 0) if keys[i] is None else (1, keys[i])

    rows = range(len(keys))
    descending = order == Qt.SortOrder.DescendingOrder
    try:
        return sorted(rows, key=key, reverse=descending)
    except TypeError:
        return sorted(
            rows, key=lambda i: (keys[i] is not None, str(keys[i])), reverse=descending
        )


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
        filtered_text: str = "Nothing here matches the search and filters.",
    ) -> None:
        super().__init__(parent)
        self._empty_text = empty_text
        self._filtered_text = filtered_text
        self._refiltering = False
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
        self._fitting = False
        self.user_sized: set[int] = set()
        """Columns the user has sized (or a restored header state did):
        new records no longer fit them to their contents."""
        header.sectionResized.connect(self._on_header_section_resized)
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
        self.fit_columns()
        self._refresh_empty()
        self.select_keys(keys)

    def fit_columns(self) -> None:
        """Each column the user has not sized as wide as its contents (the
        last one also takes what is left over)."""
        self._fitting = True
        try:
            for column in range(self.model.columnCount()):
                if column not in self.user_sized:
                    self.view.resizeColumnToContents(column)
        finally:
            self._fitting = False

    def _on_header_section_resized(self, column: int, _old: int, _new: int) -> None:
        header = self.view.horizontalHeader()
        last = column == header.count() - 1 and header.stretchLastSection()
        if not self._fitting and not last:
            self.user_sized.add(column)

    def update_record(self, record: dict[str, Any]) -> None:
        if self._proxy.accept is None:
            self.model.update_record(record)
        else:
            # The record may leave the filter (a run that stopped running).
            self._keeping_selection(lambda: self.model.update_record(record))
        self._refresh_empty()

    def set_empty_text(self, text: str) -> None:
        self._empty_text = text
        self._refresh_empty()

    def set_filter(self, accept: Callable[[dict[str, Any]], bool] | None) -> None:
        """Show only the records ``accept`` passes (None: all of them); a
        record updated later is checked again. The selection keeps the rows
        still shown, and ``selection_changed`` fires once if it lost any."""
        self._keeping_selection(lambda: self._proxy.set_accept(accept))
        self._refresh_empty()

    def _keeping_selection(self, change: Callable[[], None]) -> None:
        """Make ``change`` to the rows shown; ``selection_changed`` fires
        once if the selection lost rows (Qt drops hidden rows from it
        without a word)."""
        before = self.selected_keys()
        self._refiltering = True
        try:
            change()
        finally:
            self._refiltering = False
        after = self.selected_keys()
        if after != before:
            self.selection_changed.emit(after)

    def shown_keys(self) -> list[str]:
        """The keys of the rows shown, top to bottom."""
        proxy, model = self._proxy, self.model
        return [
            str(
                model.records[proxy.mapToSource(proxy.index(r, 0)).row()].get(model.key)
            )
            for r in range(proxy.rowCount())
        ]

    def selected_keys(self) -> list[str]:
        """The keys of the rows selected, in the order the records were given
        (whatever the sort)."""
        model = self.model
        keys = {
            str(model.records[self._proxy.mapToSource(i).row()].get(model.key))
            for i in self.view.selectionModel().selectedRows()
        }
        return sorted(keys, key=model.given_place)

    def select_keys(self, keys: Sequence[str]) -> None:
        """Select exactly these rows, in one change: ``selection_changed``
        fires once (not once per row and once for the clearing), and not at
        all when they are selected already."""
        wanted = {str(k) for k in keys}
        if set(self.selected_keys()) == wanted:
            return
        rows = QItemSelection()
        for key in wanted:
            row = self.model.row_of(key)
            if row is None:
                continue
            proxy_index = self._proxy.mapFromSource(self.model.index(row, 0))
            if proxy_index.isValid():  # not hidden by the filter
                rows.select(proxy_index, proxy_index)
        selection = self.view.selectionModel()
        selection.select(
            rows,
            selection.SelectionFlag.ClearAndSelect | selection.SelectionFlag.Rows,
        )

    def _refresh_empty(self) -> None:
        if not self.model.records:
            self.empty_label.setText(self._empty_text)
        elif not self._proxy.rowCount():
            self.empty_label.setText(self._filtered_text)
        else:
            self._stack.setCurrentWidget(self.view)
            return
        self._stack.setCurrentWidget(self.empty_label)

    def _on_view_selection_changed(self, *_: object) -> None:
        if not self._refiltering:  # set_filter says what changed, once
            self.selection_changed.emit(self.selected_keys())

    def _on_view_activated(self, index: QModelIndex) -> None:
        record = self.model.records[self._proxy.mapToSource(index).row()]
        self.activation_requested.emit(str(record.get(self.model.key)))
