"""The designer's Design tab: one editor per env kind, from one table.

:data:`EDITORS` maps each kind to its editor class; every class is built
the same way, from the designer's :class:`EditorContext`, and emits the same
signals (``studio.environments.kind_editor``). :class:`EditorStack` shows
the open document's editor, building each when an env of its kind is first
opened (or a script asks for it): building all four was a fifth of the
launch, before the project had even opened.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QStackedWidget, QWidget

from studio.environments.grid_editor import GridEditor
from studio.environments.gymnasium_editor import GymnasiumEditor
from studio.environments.kind_editor import EditorContext, KindEditor
from studio.environments.python_editor import PythonEditor
from studio.environments.workflow_editor import WorkflowEditor

EDITORS: dict[str, type[KindEditor]] = {
    "workflow": WorkflowEditor,
    "grid": GridEditor,
    "gymnasium": GymnasiumEditor,
    "python": PythonEditor,
}
"""The editor class of each env kind (``contract.ENV_KINDS``)."""


class EditorStack(QStackedWidget):
    """The empty page, then one page per kind in :data:`EDITORS` order.
    ``stack[kind]`` is that kind's editor, built on first use."""

    editor_built = Signal(object)
    """A kind's editor (``KindEditor``) was just built: connect to it."""

    def __init__(self, context: EditorContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._context = context
        self.built: dict[str, KindEditor] = {}
        """The editors built so far, by kind."""
        self.empty_page = QLabel(
            "Open an environment from the list, or press New… to design one.",
            alignment=Qt.AlignmentFlag.AlignCenter,
            wordWrap=True,
        )
        self.empty_page.setStyleSheet("color: palette(mid);")
        self.addWidget(self.empty_page)
        for _ in EDITORS:
            self.addWidget(QWidget())  # a placeholder until the editor is built

    def __getitem__(self, kind: str) -> KindEditor:
        editor = self.built.get(kind)
        if editor is None:
            editor = self.built[kind] = EDITORS[kind](self._context)
            index = self.page_index(kind)
            placeholder = self.widget(index)
            current = self.currentIndex()
            self.insertWidget(index, editor)
            if placeholder is not None:
                self.removeWidget(placeholder)
                placeholder.deleteLater()
            self.setCurrentIndex(current)
            self.editor_built.emit(editor)
        return editor

    @staticmethod
    def page_index(kind: str) -> int:
        """The page of a kind's editor (0: the empty page)."""
        return 1 + list(EDITORS).index(kind) if kind in EDITORS else 0

    def show_kind(self, kind: str) -> None:
        """Show the editor of ``kind`` (the empty page for none)."""
        self.setCurrentIndex(self.page_index(kind))


__all__ = ["EDITORS", "EditorStack"]
