"""Help → Keyboard shortcuts: the shortcuts of the window's actions, read
from the actions themselves so the list cannot drift from what the keys do."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

APPLICATION = "Application"


def shortcut_rows(
    window: QWidget,
    groups: dict[str, QWidget],
    keys: dict[str, list[tuple[str, str]]] | None = None,
) -> list[tuple[str, str, str]]:
    """(group, action, keys) for every action under ``window`` that has a
    shortcut; an action belongs to the first of ``groups`` (title → widget)
    that holds it, else to the application. ``keys`` adds, per group title,
    the (action, keys) a widget handles itself rather than through actions."""
    rows: dict[tuple[str, str, str], None] = {
        (group, text, key): None
        for group, pairs in (keys or {}).items()
        for text, key in pairs
    }
    for action in window.findChildren(QAction):
        shown = ", ".join(
            k.toString(QKeySequence.SequenceFormat.NativeText)
            for k in action.shortcuts()
        )
        if not shown:
            continue
        owner = action.parent()
        group = APPLICATION
        for title, widget in groups.items():
            if owner is widget or (
                isinstance(owner, QWidget) and widget.isAncestorOf(owner)
            ):
                group = title
                break
        text = action.text().replace("&&", "\0").replace("&", "").replace("\0", "&")
        rows[(group, text.rstrip("…").strip(), shown)] = None
    order = [APPLICATION, *groups, *(g for g in keys or {} if g not in groups)]
    return sorted(rows, key=lambda r: (order.index(r[0]), r[1].lower()))


class ShortcutsDialog(QDialog):
    """The shortcuts, one section per workspace."""

    def __init__(
        self, rows: list[tuple[str, str, str]], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Action", "Keys"])
        self.tree.header().setSectionResizeMode(
            0, QHeaderView.ResizeMode.ResizeToContents
        )
        sections: dict[str, QTreeWidgetItem] = {}
        for group, text, keys in rows:
            if group not in sections:
                sections[group] = QTreeWidgetItem(self.tree, [group])
                sections[group].setFirstColumnSpanned(True)
            QTreeWidgetItem(sections[group], [text, keys])
        self.tree.expandAll()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tree)
        layout.addWidget(buttons)
        self.resize(460, 520)
