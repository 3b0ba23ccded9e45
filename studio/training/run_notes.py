"""A run's tags and note, edited in the Training workspace's Details tab and
kept in the project (``run.annotate`` through ``Session.annotate_run``).

Tags are typed as one comma-separated line; the engine stores them
cleaned (``engine.protocol.clean_tags``). What the user typed is never
replaced while it differs from what is stored: a refused save shows its
sentence and keeps the text, a snapshot of the project arriving meanwhile
leaves it, and choosing another run saves it first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engine import protocol
from studio.common import STATUS_COLORS
from studio.session import Session
from studio.state.project_state import run_tags

if TYPE_CHECKING:
    from engine.protocol import Error


class RunNotesEditor(QWidget):
    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._run_id = ""
        self._saving = ""  # the run whose save was sent last
        self._stored: tuple[list[str], str] = ([], "")
        self.tags = QLineEdit(placeholderText="Tags, separated by commas")
        self.tags.setToolTip(
            f"Words to find and group runs by: at most {protocol.MAX_TAGS} tags of "
            f"{protocol.MAX_TAG_CHARS} characters. Enter saves."
        )
        self.note = QPlainTextEdit(placeholderText="A note on this run")
        self.note.setTabChangesFocus(True)
        self.save_button = QPushButton("Save")
        self.save_button.setToolTip("Save the tags and the note (Ctrl+S)")
        self.message = QLabel(wordWrap=True)
        self.message.hide()
        self.tags.textChanged.connect(self._on_edited)
        self.tags.returnPressed.connect(self.save)
        self.note.textChanged.connect(self._on_edited)
        self.save_button.clicked.connect(self.save)
        QShortcut(QKeySequence.StandardKey.Save, self, self.save)

        row = QHBoxLayout()
        row.addWidget(self.message, 1)
        row.addWidget(self.save_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.tags)
        layout.addWidget(self.note, 1)
        layout.addLayout(row)
        self.show_run(None)

    # ------------------------------------------------------------ queries
    @property
    def run_id(self) -> str:
        return self._run_id

    def edited(self) -> tuple[list[str], str]:
        """The tags (cleaned) and the note as typed."""
        return protocol.clean_tags([self.tags.text()]), self.note.toPlainText()

    def is_dirty(self) -> bool:
        return bool(self._run_id) and self.edited() != self._stored

    # ------------------------------------------------------------ showing
    def show_run(self, run: dict[str, Any] | None) -> None:
        """Show ``run``'s tags and note; the same run shown again keeps
        what the user typed, another run is shown after what the user typed
        for this one is saved."""
        run_id = str(run["id"]) if run else ""
        if run_id == self._run_id and self.is_dirty():
            return
        if run_id != self._run_id and self.is_dirty():
            tags, note = self.edited()
            # Refusals go to the log and a message box: this run is no
            # longer shown here.
            self._session.annotate_run(self._run_id, tags, note)
        self._run_id = run_id
        self._stored = (run_tags(run), str(run.get("note") or "")) if run else ([], "")
        self._set_text(", ".join(self._stored[0]), self._stored[1])
        self._show_message("")
        for editor in (self.tags, self.note):
            editor.setEnabled(run is not None)
        self._on_edited()

    def _set_text(self, tags: str, note: str) -> None:
        if self.tags.text() != tags:
            self.tags.setText(tags)
        if self.note.toPlainText() != note:
            self.note.setPlainText(note)

    # ------------------------------------------------------------- saving
    def save(self) -> None:
        if not self.is_dirty():
            return
        tags, note = self.edited()
        self._saving = self._run_id
        self._show_message("Saving…")
        self._session.annotate_run(
            self._run_id, tags, note, on_saved=self._on_saved, on_error=self._on_error
        )

    def _on_saved(self) -> None:
        run = self._session.state.run(self._saving)
        if self._saving != self._run_id or run is None:
            return  # another run is shown now
        self._stored = (run_tags(run), str(run.get("note") or ""))
        if self.edited() == self._stored:
            # The stored form of the tags (cleaned) replaces what was typed.
            self._set_text(", ".join(self._stored[0]), self._stored[1])
        self._show_message("Saved.")
        self._on_edited()

    def _on_error(self, error: Error) -> None:
        if self._saving == self._run_id:
            self._show_message(error.message, error=True)
        else:  # another run is shown now: say it where every refusal goes
            self._session.request_failed.emit(error.message)

    def _show_message(self, text: str, error: bool = False) -> None:
        color = STATUS_COLORS.get("failed", "#c62828") if error else ""
        self.message.setStyleSheet(f"color: {color};" if color else "")
        self.message.setText(text)
        self.message.setVisible(bool(text))

    def _on_edited(self) -> None:
        self.save_button.setEnabled(self.is_dirty())
