"""The head of the designer's open document: its title with the modified
mark, and its actions (undo, redo, save, save as, validate, train)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence, QUndoStack
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from widgets.fit import undo_redo_actions


class DocumentHeader(QWidget):
    """The title on a row of its own (beside the buttons it was cut to a few
    letters in a 1,024 px window), the buttons under it. The host adds
    :meth:`shortcut_actions` to itself: their shortcuts work wherever the
    focus is inside it."""

    save_requested = Signal()
    save_as_requested = Signal()
    validate_requested = Signal()
    train_requested = Signal()

    def __init__(self, undo_stack: QUndoStack, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.RichText)
        # A long name, the modified mark and "Undo <edit>" must not widen
        # the window: the title gives way (clipped) to the buttons.
        self.title.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.undo_action, self.redo_action = undo_redo_actions(undo_stack, self)
        self.save_action = QAction("Save", self)
        self.save_action.setShortcut(QKeySequence.StandardKey.Save)
        self.save_action.triggered.connect(lambda *_: self.save_requested.emit())
        for action in self.shortcut_actions():
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.undo_button = QToolButton()
        self.undo_button.setDefaultAction(self.undo_action)
        self.redo_button = QToolButton()
        self.redo_button.setDefaultAction(self.redo_action)
        self.save_button = QPushButton("Save")
        self.save_button.clicked.connect(lambda *_: self.save_requested.emit())
        self.save_as_button = QPushButton("Save as…")
        self.save_as_button.clicked.connect(lambda *_: self.save_as_requested.emit())
        self.validate_button = QPushButton("Validate")
        self.validate_button.setToolTip(
            "Check the environment in the engine: fields, reachability, rewards, "
            "Gymnasium and SB3 check_env, determinism."
        )
        self.validate_button.clicked.connect(lambda *_: self.validate_requested.emit())
        self.train_button = QPushButton("Train this environment…")
        self.train_button.setToolTip(
            "Save, then open a new training run on this environment with a "
            "fitting algorithm (MaskablePPO for workflows, PPO for discrete "
            "actions, SAC for continuous ones)."
        )
        self.train_button.clicked.connect(lambda *_: self.train_requested.emit())
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for w in (
            self.undo_button,
            self.redo_button,
            *self.document_buttons(),
        ):
            buttons.addWidget(w)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addLayout(buttons)

    def shortcut_actions(self) -> tuple[QAction, ...]:
        return (self.undo_action, self.redo_action, self.save_action)

    def document_buttons(self) -> tuple[QPushButton, ...]:
        """The buttons that act on an open document."""
        return (
            self.save_button,
            self.save_as_button,
            self.validate_button,
            self.train_button,
        )

    def show_document(
        self, path: Path | None, name: str = "", kind: str = "", modified: bool = False
    ) -> None:
        """Title the document ``name`` of ``kind`` at ``path`` (None: none open)."""
        if path is None:
            self.title.setText("<b>No environment open</b>")
            return
        mark = " <span style='color:#b8860b'>● modified</span>" if modified else ""
        # The mark goes right after the name: the title is clipped from the
        # right when the header is narrow, and the mark matters most.
        self.title.setText(
            f"<span style='font-size:15px'><b>{name}</b></span>{mark} "
            f"<span style='color:gray'>{kind} · {path.name}</span>"
        )
        self.title.setToolTip(str(path))


__all__ = ["DocumentHeader"]
