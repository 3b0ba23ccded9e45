"""A searchable picker: a text field over a filtered list of named entries.

Each entry has a value (what is stored: ``rlstudio/maze-v0``, a folder, a
Hub id), a label shown for it (``maze``), a section (``Catalog``, ``This
project``, ``HF cache``, ``Hub``) and a detail line. Typing filters the list
(case-insensitive, on label, value and detail); clicking or pressing Enter
on an entry picks it, so a value never has to be typed. Typed text that
matches no entry is kept as the value (a path, an id the list does not
know); ``strict`` pickers then say, in one sentence under the field, that the
value is unknown.

Signals: ``value_changed(str)`` on every change of the value,
``search_requested(str)`` (debounced) so the host can look the text up in a
slow source (the Hub) and add the answers with :meth:`set_entries`, and
``activation_requested(str)`` when an entry is double-clicked (or Enter is
pressed on it in the list).
List items drag the MIME data :meth:`set_drag_data` makes for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from PySide6.QtCore import QMimeData, Qt, QTimer, Signal
from PySide6.QtGui import QDrag, QFocusEvent, QKeyEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

VALUE_ROLE = Qt.ItemDataRole.UserRole
SEARCH_DELAY_MS = 350
"""Typing pause before ``search_requested`` fires."""
LIST_ROWS = 8
"""Rows the open list shows before it scrolls."""


@dataclass(frozen=True)
class PickerEntry:
    value: str
    label: str = ""
    """Shown for the entry; empty: the value."""
    section: str = ""
    detail: str = ""
    """A second line (tooltip and search text): the id behind a name, a size."""

    @property
    def shown(self) -> str:
        return self.label or self.value

    def matches(self, text: str) -> bool:
        needle = text.strip().casefold()
        return not needle or any(
            needle in part.casefold() for part in (self.value, self.label, self.detail)
        )


class _EntryList(QListWidget):
    """The list; its items drag what the picker's drag hook makes of them."""

    def __init__(self, picker: SearchPicker) -> None:
        super().__init__()
        self._picker = picker

    def startDrag(self, supported: Qt.DropAction) -> None:
        item = self.currentItem()
        entry = self._picker.entry_for(item.data(VALUE_ROLE)) if item else None
        make = self._picker.drag_data
        if entry is None or make is None:
            return
        drag = QDrag(self)
        drag.setMimeData(make(entry))
        drag.exec(Qt.DropAction.CopyAction)


class SearchPicker(QWidget):
    value_changed = Signal(str)
    search_requested = Signal(str)
    activation_requested = Signal(str)

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        strict: bool = False,
        unknown_message: str = "{value} is not one of the known entries.",
        always_open: bool = False,
        browse_folders: bool = False,
        placeholder: str = "Search or pick…",
    ) -> None:
        super().__init__(parent)
        self.strict = strict
        self.unknown_message = unknown_message
        self.always_open = always_open
        self.drag_data: Callable[[PickerEntry], QMimeData] | None = None
        self._entries: list[PickerEntry] = []
        self._value = ""
        self._status = ""
        self._searching = False
        """The text was typed since the last pick: it filters the list."""
        self.edit = QLineEdit(placeholderText=placeholder, clearButtonEnabled=True)
        self.edit.textEdited.connect(self._on_edit_text_edited)
        self.edit.returnPressed.connect(self._on_edit_return_pressed)
        self.edit.installEventFilter(self)
        self.toggle = QToolButton()
        self.toggle.setText("▾")
        self.toggle.setToolTip("Show the list")
        self.toggle.setCheckable(True)
        self.toggle.toggled.connect(self._on_toggle_toggled)
        self.browse = QToolButton()
        self.browse.setText("…")
        self.browse.setToolTip("Choose a folder")
        self.browse.clicked.connect(self._on_browse_clicked)
        self.browse.setVisible(browse_folders)
        self.list = _EntryList(self)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.itemClicked.connect(self._on_list_item_clicked)
        self.list.itemActivated.connect(self._on_list_item_activated)
        self.list.installEventFilter(self)
        # Long details elide; the tooltip has them whole.
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.status_label = QLabel(wordWrap=True)
        self.status_label.setStyleSheet("color: #b35c00;")
        self.status_label.hide()
        self._search_timer = QTimer(self, singleShot=True, interval=SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(self._on_search_timer_timeout)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.edit, 1)
        row.addWidget(self.toggle)
        row.addWidget(self.browse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(row)
        layout.addWidget(self.list)
        layout.addWidget(self.status_label)
        if always_open:
            self.toggle.hide()
        else:
            row_height = self.list.fontMetrics().height() + 4
            self.list.setMaximumHeight(
                row_height * LIST_ROWS + 2 * self.list.frameWidth()
            )
            self.list.hide()

    # ------------------------------------------------------------ API
    def value(self) -> str:
        return self._value

    def set_value(self, value: str) -> None:
        """Show ``value`` (by its entry's label when it has one); no signal."""
        self._value = value
        self._searching = False
        entry = self.entry_for(value)
        self.edit.setText(entry.shown if entry else value)
        self._refresh_status()

    def entries(self, section: str | None = None) -> list[PickerEntry]:
        return [e for e in self._entries if section is None or e.section == section]

    def entry_for(self, value: str) -> PickerEntry | None:
        return next((e for e in self._entries if e.value == value), None)

    def set_entries(
        self, entries: Iterable[PickerEntry], section: str | None = None
    ) -> None:
        """Replace every entry, or with ``section`` only that section's."""
        new = list(entries)
        if section is None:
            self._entries = new
        else:
            kept = [e for e in self._entries if e.section != section]
            self._entries = kept + [e for e in new if e.section == section]
        if self.entry_for(self._value) and not self.edit.hasFocus():
            self.edit.setText(self.entry_for(self._value).shown)  # type: ignore[union-attr]
        self._fill_list()
        self._refresh_status()

    def set_strict(self, strict: bool, unknown_message: str = "") -> None:
        """Whether a value no entry has is called unknown (and how)."""
        self.strict = strict
        if unknown_message:
            self.unknown_message = unknown_message
        self._refresh_status()

    def set_browse_folders(self, shown: bool) -> None:
        self.browse.setVisible(shown)

    def set_status(self, text: str) -> None:
        """One sentence under the field (a failed search); empty hides it."""
        self._status = text
        self._refresh_status()

    def status(self) -> str:
        return self.status_label.text() if self.status_label.isVisibleTo(self) else ""

    def visible_values(self) -> list[str]:
        """The values the list shows now, in order."""
        out = []
        for row in range(self.list.count()):
            item = self.list.item(row)
            if not item.isHidden() and item.data(VALUE_ROLE) is not None:
                out.append(str(item.data(VALUE_ROLE)))
        return out

    def is_open(self) -> bool:
        return self.list.isVisibleTo(self)

    def set_open(self, shown: bool) -> None:
        self.toggle.setChecked(shown or self.always_open)
        self.list.setVisible(shown or self.always_open)

    def pick(self, value: str) -> None:
        """Pick ``value`` as if clicked (emits ``value_changed``)."""
        entry = self.entry_for(value)
        self._searching = False
        self.edit.setText(entry.shown if entry else value)
        self.set_open(False)  # closed before the value goes out
        self._fill_list()
        self._set_value(value)

    # ---------------------------------------------------------- list
    def _fill_list(self) -> None:
        text = self.edit.text() if self._searching else ""
        self.list.clear()
        section = None
        for entry in self._entries:
            if not entry.matches(text):
                continue
            if entry.section and entry.section != section:
                section = entry.section
                heading = QListWidgetItem(section)
                heading.setFlags(Qt.ItemFlag.NoItemFlags)
                font = heading.font()
                font.setBold(True)
                heading.setFont(font)
                self.list.addItem(heading)
            item = QListWidgetItem(
                f"{entry.shown}  —  {entry.detail}" if entry.detail else entry.shown
            )
            item.setData(VALUE_ROLE, entry.value)
            item.setToolTip(
                "\n".join(x for x in (entry.shown, entry.value, entry.detail) if x)
            )
            item.setFlags(
                Qt.ItemFlag.ItemIsEnabled
                | Qt.ItemFlag.ItemIsSelectable
                | Qt.ItemFlag.ItemIsDragEnabled
            )
            self.list.addItem(item)
        self.list.setDragEnabled(self.drag_data is not None)

    def _refresh_status(self) -> None:
        text = self._status
        if (
            not text
            and self.strict
            and self._value
            and self._entries
            and self.entry_for(self._value) is None
        ):
            text = self.unknown_message.format(value=self._value)
        self.status_label.setText(text)
        self.status_label.setVisible(bool(text))

    def _set_value(self, value: str) -> None:
        changed = value != self._value
        self._value = value
        self._refresh_status()
        if changed:
            self.value_changed.emit(value)

    # ------------------------------------------------------- handlers
    def _on_edit_text_edited(self, text: str) -> None:
        # Typed text is the value unless it names an entry (by label or id).
        match = next(
            (e for e in self._entries if text.strip() in (e.label, e.value)), None
        )
        self._searching = True
        self._set_value(match.value if match else text.strip())
        self._fill_list()
        self.set_open(True)
        self._search_timer.start()

    def _on_edit_return_pressed(self) -> None:
        shown = self.visible_values()
        if self._searching and shown:
            self.pick(shown[0])

    def _on_toggle_toggled(self, checked: bool) -> None:
        if checked:
            self._fill_list()
        self.list.setVisible(checked or self.always_open)

    def _on_list_item_clicked(self, item: QListWidgetItem) -> None:
        value = item.data(VALUE_ROLE)
        if value is not None:
            self.pick(str(value))

    def _on_list_item_activated(self, item: QListWidgetItem) -> None:
        value = item.data(VALUE_ROLE)
        if value is not None:
            self.pick(str(value))
            self.activation_requested.emit(str(value))

    def _on_browse_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a folder", self._value)
        if folder:
            self.pick(folder)

    def _on_search_timer_timeout(self) -> None:
        self.search_requested.emit(self.edit.text().strip())

    def _close_unless_focused(self) -> None:
        # Leaving the field ends the search (the list keeps the focus when
        # the user walks into it).
        if not (self.edit.hasFocus() or self.list.hasFocus()):
            self._searching = False
            self.set_open(False)

    def eventFilter(self, watched: object, event: object) -> bool:
        if (
            watched in (self.edit, self.list)
            and isinstance(event, QFocusEvent)
            and event.type() == QFocusEvent.Type.FocusOut
            and not self.always_open
        ):
            QTimer.singleShot(0, self, self._close_unless_focused)
        # Down arrow from the field walks into the list.
        if (
            watched is self.edit
            and isinstance(event, QKeyEvent)
            and event.type() == QKeyEvent.Type.KeyPress
            and event.key() == Qt.Key.Key_Down
            and self.visible_values()
        ):
            self.set_open(True)
            self.list.setFocus()
            for row in range(self.list.count()):
                if self.list.item(row).data(VALUE_ROLE) is not None:
                    self.list.setCurrentRow(row)
                    break
            return True
        return super().eventFilter(watched, event)  # type: ignore[arg-type]
