"""A palette of node types, grouped by category, with a search box.

Items are dragged onto a :class:`widgets.node_graph.NodeGraphView` with the
MIME type :data:`widgets.node_graph.NODE_TYPE_MIME`; a double-click (or
Enter) emits ``node_type_activated(type)`` so the host can add the node at a
place of its choosing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QDrag
from PySide6.QtWidgets import (
    QAbstractItemView,
    QLabel,
    QLineEdit,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from widgets.node_graph import NODE_TYPE_MIME

TYPE_ROLE = Qt.ItemDataRole.UserRole


class _PaletteTree(QTreeWidget):
    """A tree whose leaf items drag their node type name."""

    def mimeTypes(self) -> list[str]:
        return [NODE_TYPE_MIME]

    def mimeData(self, items: Sequence[QTreeWidgetItem]) -> QMimeData:
        mime = QMimeData()
        types = [i.data(0, TYPE_ROLE) for i in items if i.data(0, TYPE_ROLE)]
        if types:
            mime.setData(NODE_TYPE_MIME, types[0].encode("utf-8"))
            mime.setText(types[0])
        return mime

    def startDrag(self, supported: Qt.DropAction) -> None:
        items = [i for i in self.selectedItems() if i.data(0, TYPE_ROLE)]
        if not items:
            return
        drag = QDrag(self)
        drag.setMimeData(self.mimeData(items))
        drag.exec(Qt.DropAction.CopyAction)


class NodePalette(QWidget):
    """Lists node types (dicts with ``type``, ``title``, ``category`` and
    ``help`` or ``description``).

    Signals: ``node_type_activated(type)``.
    """

    node_type_activated = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.search = QLineEdit(
            placeholderText="Search nodes…", clearButtonEnabled=True
        )
        self.search.textChanged.connect(self._on_search_text_changed)
        self.tree = _PaletteTree()
        self.tree.setHeaderHidden(True)
        self.tree.setDragEnabled(True)
        self.tree.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.itemActivated.connect(self._on_tree_item_activated)
        self.empty_label = QLabel(wordWrap=True, alignment=Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setStyleSheet("color: palette(mid); padding: 12px;")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.search)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.empty_label)
        self._types: list[dict[str, Any]] = []
        self._empty_text = "No node types yet."
        self._refresh_empty()

    # ------------------------------------------------------------ API
    def set_node_types(self, types: Iterable[Mapping[str, Any]]) -> None:
        self._types = [dict(t) for t in types]
        self._rebuild()

    def set_empty_text(self, text: str) -> None:
        """What the palette says while it has no node types."""
        self._empty_text = text
        self._refresh_empty()

    def type_item(self, type_name: str) -> QTreeWidgetItem | None:
        for _group, children in self._groups():
            for child in children:
                if child.data(0, TYPE_ROLE) == type_name:
                    return child
        return None

    def visible_types(self) -> list[str]:
        out: list[str] = []
        for group, children in self._groups():
            for child in children:
                if not child.isHidden() and not group.isHidden():
                    out.append(child.data(0, TYPE_ROLE))
        return out

    def _groups(self) -> list[tuple[QTreeWidgetItem, list[QTreeWidgetItem]]]:
        """Each category's item with its node types' items, in tree order."""
        out = []
        for i in range(self.tree.topLevelItemCount()):
            group = self.tree.topLevelItem(i)
            if group is None:
                continue
            children = [group.child(j) for j in range(group.childCount())]
            out.append((group, [c for c in children if c is not None]))
        return out

    # -------------------------------------------------------- building
    def _rebuild(self) -> None:
        self.tree.clear()
        groups: dict[str, QTreeWidgetItem] = {}
        for t in sorted(self._types, key=lambda t: (t.get("category", ""), t["title"])):
            category = t.get("category") or "Other"
            group = groups.get(category)
            if group is None:
                group = QTreeWidgetItem([category])
                group.setFlags(Qt.ItemFlag.ItemIsEnabled)
                font = group.font(0)
                font.setBold(True)
                group.setFont(0, font)
                groups[category] = group
                self.tree.addTopLevelItem(group)
            item = QTreeWidgetItem([t.get("title") or t["type"]])
            item.setData(0, TYPE_ROLE, t["type"])
            help_text = t.get("help") or t.get("description") or ""
            item.setToolTip(0, f"{t['type']}\n{help_text}".strip())
            item.setFlags(
                Qt.ItemFlag.ItemIsEnabled
                | Qt.ItemFlag.ItemIsSelectable
                | Qt.ItemFlag.ItemIsDragEnabled
            )
            group.addChild(item)
        self.tree.expandAll()
        self._on_search_text_changed(self.search.text())

    def _on_search_text_changed(self, text: str) -> None:
        words = text.lower().split()
        for group, children in self._groups():
            shown = 0
            for child in children:
                haystack = " ".join(
                    (child.text(0), child.toolTip(0), group.text(0))
                ).lower()
                match = all(w in haystack for w in words)
                child.setHidden(not match)
                shown += match
            group.setHidden(shown == 0)
        self._refresh_empty()

    def _refresh_empty(self) -> None:
        has_any = bool(self.visible_types())
        self.empty_label.setVisible(not has_any)
        if self._types:
            self.empty_label.setText(f"No node matches “{self.search.text()}”.")
        else:
            self.empty_label.setText(self._empty_text)

    def _on_tree_item_activated(self, item: QTreeWidgetItem, column: int) -> None:
        type_name = item.data(0, TYPE_ROLE)
        if type_name:
            self.node_type_activated.emit(type_name)
